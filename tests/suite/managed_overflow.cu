// managed_overflow: a store one past a cudaMallocManaged buffer.
// ./managed_overflow runs the buggy variant, ./managed_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_managed(float* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 1.0f; }  // BUG:managed_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p;
    CK(cudaMallocManaged(&p, 100 * 4));
    k_managed<<<1, 128>>>(p, clean ? 100 : 101);
    SYNC();
    return done();
}
