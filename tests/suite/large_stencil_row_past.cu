// large_stencil_row_past: a straight-line 5-point stencil over a 1000 x 1000 float grid (a large
// block) whose bottom-row threads read the row below the grid (a missing `y + 1 < h` test): heap
// overflow, read, one row past a large block. Straight-line kernels over large blocks check their
// in-bounds accesses against the block's bounds, looked up once per parameter
// (instrument/src/ptx/bounds.rs); the row past the end must still be caught.
//
// ./large_stencil_row_past runs the buggy variant, ./large_stencil_row_past clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_stencil(float* out, const float* in, int w, int h, int last_row) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < 1 || x >= w - 1 || y < 1 || y > last_row) return;
    out[y * w + x] = 0.2f * (in[y * w + x] + in[y * w + x - 1] + in[y * w + x + 1] + in[(y - 1) * w + x] + in[(y + 1) * w + x]);  // BUG:large_stencil_row_past
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int w = 1000, h = 1000;  // not a whole number of pool chunks: the row past is the block's own slack
    float *in = dmalloc<float>((size_t)w * h), *out = dmalloc<float>((size_t)w * h);
    k_stencil<<<dim3((w + 31) / 32, (h + 7) / 8), dim3(32, 8)>>>(out, in, w, h, clean ? h - 2 : h - 1);
    SYNC();
    return done();
}
