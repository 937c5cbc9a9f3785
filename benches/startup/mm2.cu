// 2MM (PolyBench-like): T = alpha*A*B; D = beta*D + T*C; N = 512. Two kernels.
#include "startup.h"
__global__ void mm1(const float* a, const float* b, float* t, float alpha, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && j < n) { float s = 0; for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j]; t[i * n + j] = alpha * s; }
}
__global__ void mm2(const float* t, const float* c, float* d, float beta, int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && j < n) { float s = 0; for (int k = 0; k < n; k++) s += t[i * n + k] * c[k * n + j]; d[i * n + j] = beta * d[i * n + j] + s; }
}
int main() {
    const int n = 512;
    float *a = to_dev(rand_vec(n * n, 1)), *b = to_dev(rand_vec(n * n, 2)), *c = to_dev(rand_vec(n * n, 3)), *d = to_dev(rand_vec(n * n, 4)), *t;
    CK(cudaMalloc(&t, n * n * 4));
    dim3 blk(32, 8), grd(n / 32, n / 8);
    short_run("mm2", [&] { mm1<<<grd, blk>>>(a, b, t, 1.5f, n); mm2<<<grd, blk>>>(t, c, d, 0.5f, n); }, [&] { return sum_dev(d, n * n); });
}
