// loop_stride_far: a column walk with the wrong row count strides 64 rows (256 KiB) past the end of
// a 4 MiB matrix, while another large buffer is live (heap overflow, read, non-adjacent). The hoisted
// range test must fail and the checked loop report the first row past the end. With pointer tags
// (the default) the large buffers lie back to back, so that row is the first bytes of `other`, seen
// through the matrix's tag: a tag-mismatch naming both buffers.
// ./loop_stride_far runs the buggy variant, ./loop_stride_far clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_col_max(float* out, const float* m, int rows, int n) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    float best = -1e30f;
    for (int k = 0; k < rows; k++) best = fmaxf(best, m[(size_t)k * n + c]);  // BUG:loop_stride_far
    out[c] = best;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 1024;
    float *m = dmalloc<float>(n * n), *other = dmalloc<float>(n * n), *o = dmalloc<float>(n);
    k_col_max<<<n / 128, 128>>>(o, m, clean ? n : n + 64, n);
    SYNC();
    CK(cudaFree(other));
    return done();
}
