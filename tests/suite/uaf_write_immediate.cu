// uaf_write_immediate: a kernel writes a buffer freed just before the launch (use after free, write).
// ./uaf_write_immediate runs the buggy variant, ./uaf_write_immediate clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_write_at(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 9.0f; }  // BUG:uaf_write_immediate

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(N);
    CK(cudaFree(p));
    if (clean) p = dmalloc<float>(N);
    k_write_at<<<1, 32>>>(p, 10);
    SYNC();
    return done();
}
