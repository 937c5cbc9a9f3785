// uaf_read_immediate: a kernel reads a buffer freed just before the launch (use after free, read).
// ./uaf_read_immediate runs the buggy variant, ./uaf_read_immediate clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_read_at(float* o, const float* p, long idx) { if (threadIdx.x == 0) o[0] = p[idx]; }  // BUG:uaf_read_immediate

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *p = dmalloc<float>(N), *o = dmalloc<float>(1);
    CK(cudaFree(p));
    if (clean) p = dmalloc<float>(N);
    k_read_at<<<1, 32>>>(o, p, 10);
    SYNC();
    return done();
}
