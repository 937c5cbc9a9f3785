// uaf_atomic: an atomic counter kernel on a freed buffer (use after free, atomic).
// ./uaf_atomic runs the buggy variant, ./uaf_atomic clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_atomic(int* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(&p[i], 1); }  // BUG:uaf_atomic

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* p = dmalloc<int>(N);
    CK(cudaFree(p));
    if (clean) p = dmalloc<int>(N);
    k_atomic<<<1, 32>>>(p, 32);
    SYNC();
    return done();
}
