// local_nested_callee_read: kernel -> stage (a non-inlined function with a local window array) ->
// peek (non-inlined) reads one element past the window's end, two calls below the kernel.
// ./local_nested_callee_read runs the buggy variant, ./local_nested_callee_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ __noinline__ float peek(const float* w, int at) {
    return w[at] * 2.0f;  // BUG:local_nested_callee_read
}

__device__ __noinline__ float stage(const float* in, int last) {
    float window[6];
    for (int i = 0; i < 6; i++) window[i] = in[i] + 1.0f;
    float s = 0.0f;
    for (int i = 0; i <= last; i++) s += peek(window, i);
    return s;
}

__global__ void k_nested(const float* in, float* out, int last) {
    float keep[3];
    for (int i = 0; i < 3; i++) keep[i] = in[i + 8];
    out[threadIdx.x] = stage(in + (threadIdx.x & 15), last) + keep[threadIdx.x % 3];
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(64);
    float* out = dmalloc<float>(32);
    k_nested<<<1, 32>>>(in, out, clean ? 5 : 6);
    SYNC();
    return done();
}
