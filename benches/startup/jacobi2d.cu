// Jacobi-2D (PolyBench-like): 20 steps of two 5-point stencils (A -> B, B -> A); N = 2048.
#include "startup.h"
__global__ void step(const float* in, float* out, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && j > 0 && i < n - 1 && j < n - 1)
        out[i * n + j] = 0.2f * (in[i * n + j] + in[i * n + j - 1] + in[i * n + j + 1] + in[(i + 1) * n + j] + in[(i - 1) * n + j]);
}
__global__ void step_back(const float* in, float* out, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && j > 0 && i < n - 1 && j < n - 1)
        out[i * n + j] = 0.25f * (in[i * n + j - 1] + in[i * n + j + 1] + in[(i + 1) * n + j] + in[(i - 1) * n + j]);
}
int main() {
    const int n = 2048;
    float *a = to_dev(rand_vec(n * n, 1)), *b = to_dev(rand_vec(n * n, 2));
    dim3 blk(32, 8), grd(n / 32, n / 8);
    short_run("jacobi2d", [&] { for (int t = 0; t < 20; t++) { step<<<grd, blk>>>(a, b, n); step_back<<<grd, blk>>>(b, a, n); } }, [&] { return sum_dev(a, n * n); });
}
