// loop_overrun_rows: each thread sums one row of a small 64 KiB matrix with an inclusive bound, so
// every row reads the next row's first element and the last row reads one past the block. Each
// thread's loop range is its own; only the last one leaves the block (a shared-slab block: the
// range test sweeps its shadow and must send that thread's loop to its checked copy).
// ./loop_overrun_rows runs the buggy variant, ./loop_overrun_rows clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_row_sums(float* out, const float* m, int rows, int cols, int inclusive) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0;
    for (int j = 0; j < cols + inclusive; j++) s += m[r * cols + j];  // BUG:loop_overrun_rows
    out[r] = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int rows = 128, cols = 128;
    float *m = dmalloc<float>(rows * cols), *o = dmalloc<float>(rows);
    k_row_sums<<<1, rows>>>(o, m, rows, cols, clean ? 0 : 1);
    SYNC();
    return done();
}
