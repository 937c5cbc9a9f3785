// loop_uaf_small: every thread's loop reads the whole of a freed 16 KiB vector (a small block, in a
// shared slab, so the loop's range test sweeps its shadow: it must fail once the vector is freed).
// ./loop_uaf_small runs the buggy variant, ./loop_uaf_small clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_dot_rows(float* out, const float* a, const float* x, int n) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    float s = 0;
    for (int j = 0; j < n; j++) s += a[(size_t)r * n + j] * x[j];  // BUG:loop_uaf_small
    out[r] = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 4096;
    float *a = dmalloc<float>((size_t)n * n), *x = dmalloc<float>(n), *o = dmalloc<float>(n);
    if (!clean) CK(cudaFree(x));
    k_dot_rows<<<n / 256, 256>>>(o, a, x, n);
    SYNC();
    return done();
}
