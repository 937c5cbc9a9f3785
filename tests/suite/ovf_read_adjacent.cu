// ovf_read_adjacent: a reduction-style read kernel launched with n one past the input (heap overflow, read, 4 bytes).
// ./ovf_read_adjacent runs the buggy variant, ./ovf_read_adjacent clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_read(float* o, const float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i % 32] += p[i]; }  // BUG:ovf_read_adjacent

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *p = dmalloc<float>(N), *o = dmalloc<float>(32);
    k_read<<<4, 256>>>(o, p, clean ? N : N + 1);
    SYNC();
    return done();
}
