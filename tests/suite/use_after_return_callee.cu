// use_after_return_callee: inside a non-inlined function (not the kernel), a pointer a helper
// returned into its own, finished, frame is read.
// ./use_after_return_callee runs the buggy variant, ./use_after_return_callee clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ __noinline__ const float* scratch_of(const float* in, float* keep, int use_keep) {
    float scratch[8];
    for (int i = 0; i < 8; i++) scratch[i] = in[i] * 3.0f;
    if (use_keep) { for (int i = 0; i < 8; i++) keep[i] = scratch[i]; return keep; }
    const float* volatile p = scratch;  // escapes the frame
    return p;
}

__device__ __noinline__ float pick(const float* in, int lane, int use_keep) {
    float keep[8];
    const float* p = scratch_of(in, keep, use_keep);
    return p[lane & 7];  // BUG:use_after_return_callee
}

__global__ void k_uar_callee(const float* in, float* out, int use_keep) {
    out[threadIdx.x] = pick(in, threadIdx.x, use_keep);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(8);
    float* out = dmalloc<float>(32);
    k_uar_callee<<<1, 32>>>(in, out, clean ? 1 : 0);
    SYNC();
    return done();
}
