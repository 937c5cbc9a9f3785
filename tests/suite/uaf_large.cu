// uaf_large: a kernel reads a freed 16 MiB buffer (use after free, read).
// ./uaf_large runs the buggy variant, ./uaf_large clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_read_at(float* o, const float* p, long idx) { if (threadIdx.x == 0) o[0] = p[idx]; }  // BUG:uaf_large

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *p = dmalloc<float>(4 << 20), *o = dmalloc<float>(1);
    CK(cudaFree(p));
    if (clean) p = dmalloc<float>(4 << 20);
    k_read_at<<<1, 32>>>(o, p, 1000);
    SYNC();
    return done();
}
