// use_after_return_scope: a non-inlined helper fills a local scratch array and returns a pointer to
// it; the caller reads through the pointer after the helper's frame is gone.
// ./use_after_return_scope runs the buggy variant, ./use_after_return_scope clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ __noinline__ float* fill_scratch(const float* in, float* keep, int use_keep) {
    float scratch[8];
    for (int i = 0; i < 8; i++) scratch[i] = in[i] + 1.0f;
    if (use_keep) { for (int i = 0; i < 8; i++) keep[i] = scratch[i]; return keep; }
    float* volatile p = scratch;  // escapes the frame
    return p;
}

__global__ void k_use_after_return(const float* in, float* out, int use_keep) {
    float keep[8];
    float* p = fill_scratch(in, keep, use_keep);
    out[threadIdx.x] = p[threadIdx.x & 7];  // BUG:use_after_return_scope
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(8);
    float* out = dmalloc<float>(32);
    k_use_after_return<<<1, 32>>>(in, out, clean ? 1 : 0);
    SYNC();
    return done();
}
