// ovf_write_far_live: a write far past one buffer that lands inside another live buffer: invisible to redzones.
// ./ovf_write_far_live runs the buggy variant, ./ovf_write_far_live clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_write(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }  // BUG:ovf_write_far_live

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *a = dmalloc<float>(N), *b = dmalloc<float>(N);
    long off = (b - a) + 10;
    k_write<<<1, 32>>>(clean ? b : a + off - 10, 1);
    SYNC();
    return done();
}
