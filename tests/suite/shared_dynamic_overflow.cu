// shared_dynamic_overflow: a store one past a dynamic (extern) __shared__ array.
// ./shared_dynamic_overflow runs the buggy variant, ./shared_dynamic_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_shared_dynamic(float* o, int idx) { extern __shared__ float d[]; d[threadIdx.x] = 1; __syncthreads(); if (threadIdx.x == 0) { d[idx] = 2; o[0] = d[0]; } }  // BUG:shared_dynamic_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* o = dmalloc<float>(1);
    k_shared_dynamic<<<1, 64, 64 * 4>>>(o, clean ? 63 : 64);
    SYNC();
    return done();
}
