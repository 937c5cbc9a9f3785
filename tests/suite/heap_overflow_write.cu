// heap_overflow_write: a kernel copies a row into a buffer from `new int[]` with an off-by-one
// loop bound (`<=`), writing one element past the array.
// ./heap_overflow_write runs the buggy variant, ./heap_overflow_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_copy_row(const int* src, int len, int bound, int* sums) {
    int* row = new int[len];
    if (!row) return;
    for (int i = 0; i < bound; ++i) row[i] = src[(blockIdx.x * len + i) % 1000];  // BUG:heap_overflow_write
    int s = 0;
    for (int i = 0; i < len; ++i) s += row[i];
    sums[blockIdx.x] = s;
    delete[] row;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* src = dmalloc<int>(N);
    int* sums = dmalloc<int>(4);
    k_copy_row<<<4, 1>>>(src, 96, clean ? 96 : 97, sums);
    SYNC();
    return done();
}
