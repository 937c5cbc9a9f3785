// tag_neighbour_write: a batched row reduction writes batch b's results with the input's batch stride, deep into the live input buffer (tag mismatch, write).
// ./tag_neighbour_write runs the buggy variant, ./tag_neighbour_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

// Block b sums each row of batch b's rows x cols matrix; thread r writes row r's sum to out[b * out_stride + r].
__global__ void k_batch_rowsum(float* out, const float* in, int rows, int cols, long out_stride) {
    int b = blockIdx.x, r = threadIdx.x;
    if (r >= rows) return;
    const float* row = in + ((size_t)b * rows + r) * cols;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += row[c];
    out[b * out_stride + r] = s;  // BUG:tag_neighbour_write
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int batches = 4, rows = 256, cols = 64;
    float* out = dmalloc<float>(batches * rows);         // 4 KiB of results
    float* in = dmalloc<float>(batches * rows * cols);   // 256 KiB of input, right after `out`
    // The output stride copied from the input's (rows * cols) instead of rows: batches 1..3 write
    // 64, 128 and 192 KiB past `out`, all inside `in` (which starts 4.5 KiB past `out` under gasan).
    long out_stride = clean ? rows : (long)rows * cols;
    k_batch_rowsum<<<batches, rows>>>(out, in, rows, cols, out_stride);
    SYNC();
    return done();
}
