// stencil_halo: a vertical stencil that starts at row 0 and reads the halo row above the grid (heap underflow).
// ./stencil_halo runs the buggy variant, ./stencil_halo clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_stencil(float* o, const float* in, int w, int h, int y0) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y + y0;
    if (x > 0 && x < w - 1 && y < h - 1) o[y * w + x] = in[(y - 1) * w + x] + in[(y + 1) * w + x];  // BUG:stencil_halo
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int w = 64, h = 64;
    float *a = dmalloc<float>(w * h), *b = dmalloc<float>(w * h);
    k_stencil<<<dim3(1, h - 1), 64>>>(b, a, w, h, clean ? 1 : 0);
    SYNC();
    return done();
}
