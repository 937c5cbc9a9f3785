// loop_overrun_large: row sums of a 4 MiB matrix whose inner bound is inclusive; the last row's loop
// reads one element past the matrix (heap overflow, read). The loop's checks are hoisted to one range
// test per thread: the test must fail for the last row and the checked loop report the read.
// ./loop_overrun_large runs the buggy variant, ./loop_overrun_large clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_row_sums(float* out, const float* m, int n, int inclusive) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    float s = 0;
    for (int k = 0; k < n + inclusive; k++) s += m[r * n + k];  // BUG:loop_overrun_large
    out[r] = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 1024;
    float *m = dmalloc<float>(n * n), *o = dmalloc<float>(n);
    k_row_sums<<<n / 128, 128>>>(o, m, n, clean ? 0 : 1);
    SYNC();
    return done();
}
