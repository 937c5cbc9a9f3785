// transpose_wrong_dim: a transpose that strides the output by the input's width instead of its height.
// ./transpose_wrong_dim runs the buggy variant, ./transpose_wrong_dim clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_transpose(float* o, const float* in, int w, int h, int ow) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) o[x * ow + y] = in[y * w + x];  // BUG:transpose_wrong_dim
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int w = 64, h = 32;
    float *a = dmalloc<float>(w * h), *b = dmalloc<float>(w * h);
    k_transpose<<<dim3(2, 1), dim3(32, 32)>>>(b, a, w, h, clean ? h : w);
    SYNC();
    return done();
}
