// local_callee_write_past: a non-inlined helper with a scratch array of its own writes its results
// into the caller's thread-local array and writes one element past its end.
// ./local_callee_write_past runs the buggy variant, ./local_callee_write_past clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ __noinline__ void smooth_into(float* dst, const float* src, int n) {
    float tmp[6];
    for (int i = 0; i < 6; i++) tmp[i] = src[i] * 0.5f;
    for (int i = 0; i < n; i++) dst[i] = tmp[i % 6] + tmp[(i + 1) % 6];  // BUG:local_callee_write_past
}

__global__ void k_callee_write(const float* in, float* out, int n) {
    float acc[4];
    for (int i = 0; i < 4; i++) acc[i] = 0.0f;
    smooth_into(acc, in + (threadIdx.x & 31), n);
    out[threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(64);
    float* out = dmalloc<float>(32);
    k_callee_write<<<1, 32>>>(in, out, clean ? 4 : 5);
    SYNC();
    return done();
}
