// ATAX (PolyBench-like): tmp = A x; y = A^T tmp; N = 4096. Two kernels.
#include "startup.h"
__global__ void ax(const float* a, const float* x, float* tmp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float s = 0; for (int j = 0; j < n; j++) s += a[(size_t)i * n + j] * x[j]; tmp[i] = s; }
}
__global__ void aty(const float* a, const float* tmp, float* y, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n) { float s = 0; for (int i = 0; i < n; i++) s += a[(size_t)i * n + j] * tmp[i]; y[j] = s; }
}
int main() {
    const int n = 4096;
    float *a = to_dev(rand_vec((size_t)n * n, 1)), *x = to_dev(rand_vec(n, 2)), *tmp, *y;
    CK(cudaMalloc(&tmp, n * 4)); CK(cudaMalloc(&y, n * 4));
    short_run("atax", [&] { ax<<<n / 256, 256>>>(a, x, tmp, n); aty<<<n / 256, 256>>>(a, tmp, y, n); }, [&] { return sum_dev(y, n); });
}
