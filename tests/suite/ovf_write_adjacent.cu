// ovf_write_adjacent: an elementwise write kernel launched with n one past the buffer (heap overflow, write, 4 bytes).
// ./ovf_write_adjacent runs the buggy variant, ./ovf_write_adjacent clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_write(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }  // BUG:ovf_write_adjacent

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(N);
    k_write<<<4, 256>>>(p, clean ? N : N + 1);
    SYNC();
    return done();
}
