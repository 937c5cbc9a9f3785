// MVT (PolyBench-like): x1 += A y1; x2 += A^T y2; N = 4096. Two kernels.
#include "startup.h"
__global__ void mv1(const float* a, float* x1, const float* y1, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float s = x1[i]; for (int j = 0; j < n; j++) s += a[(size_t)i * n + j] * y1[j]; x1[i] = s; }
}
__global__ void mv2(const float* a, float* x2, const float* y2, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float s = x2[i]; for (int j = 0; j < n; j++) s += a[(size_t)j * n + i] * y2[j]; x2[i] = s; }
}
int main() {
    const int n = 4096;
    float *a = to_dev(rand_vec((size_t)n * n, 1)), *x1 = to_dev(rand_vec(n, 2)), *x2 = to_dev(rand_vec(n, 3)), *y1 = to_dev(rand_vec(n, 4)), *y2 = to_dev(rand_vec(n, 5));
    short_run("mvt", [&] { mv1<<<n / 256, 256>>>(a, x1, y1, n); mv2<<<n / 256, 256>>>(a, x2, y2, n); }, [&] { return sum_dev(x1, n) + sum_dev(x2, n); });
}
