// shared_static_overflow: a store one past a static __shared__ array.
// ./shared_static_overflow runs the buggy variant, ./shared_static_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_shared_static(float* o, int idx) { __shared__ float s[64]; s[threadIdx.x] = 1; __syncthreads(); if (threadIdx.x == 0) { s[idx] = 2; o[0] = s[0]; } }  // BUG:shared_static_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* o = dmalloc<float>(1);
    k_shared_static<<<1, 64>>>(o, clean ? 63 : 64);
    SYNC();
    return done();
}
