// loop_uaf_large: a strided loop sums a column of a freed 4 MiB matrix (use after free, read). Its
// checks are hoisted to one range test, which must fail once the buffer is freed.
// ./loop_uaf_large runs the buggy variant, ./loop_uaf_large clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_col_sums(float* out, const float* m, int n) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    float s = 0;
    for (int k = 0; k < n; k++) s += m[k * n + c];  // BUG:loop_uaf_large
    out[c] = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 1024;
    float *m = dmalloc<float>(n * n), *o = dmalloc<float>(n);
    if (!clean) CK(cudaFree(m));
    k_col_sums<<<n / 128, 128>>>(o, m, n);
    SYNC();
    return done();
}
