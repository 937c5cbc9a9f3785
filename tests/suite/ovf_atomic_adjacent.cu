// ovf_atomic_adjacent: an atomic counter kernel launched with n two past the buffer (heap overflow, atomic, 4 bytes).
// ./ovf_atomic_adjacent runs the buggy variant, ./ovf_atomic_adjacent clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_atomic(int* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(&p[i], 1); }  // BUG:ovf_atomic_adjacent

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* p = dmalloc<int>(N);
    k_atomic<<<4, 256>>>(p, clean ? N : N + 2);
    SYNC();
    return done();
}
