// GEMM (PolyBench-like): C = beta*C, then C += alpha*A*B; N = 512. Two kernels.
#include "startup.h"
__global__ void scale(float* c, float beta, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && j < n) c[i * n + j] *= beta;
}
__global__ void gemm(const float* a, const float* b, float* c, float alpha, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && j < n) { float s = 0; for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j]; c[i * n + j] += alpha * s; }
}
int main() {
    const int n = 512;
    float *a = to_dev(rand_vec(n * n, 1)), *b = to_dev(rand_vec(n * n, 2)), *c = to_dev(rand_vec(n * n, 3));
    dim3 blk(32, 8), grd(n / 32, n / 8);
    short_run("gemm", [&] { scale<<<grd, blk>>>(c, 0.5f, n); gemm<<<grd, blk>>>(a, b, c, 1.5f, n); }, [&] { return sum_dev(c, n * n); });
}
