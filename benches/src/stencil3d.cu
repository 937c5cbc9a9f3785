#include "bench.h"
__global__ void st7(float* o, const float* in, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < 1 || y < 1 || x >= n - 1 || y >= n - 1) return;
    for (int z = 1; z < n - 1; z++) {
        size_t i = ((size_t)z * n + y) * n + x;
        o[i] = (in[i] + in[i - 1] + in[i + 1] + in[i - n] + in[i + n] + in[i - (size_t)n * n] + in[i + (size_t)n * n]) * (1.0f / 7);
    }
}
static float *a, *b; static const int N = 256;
static double check() { float v; CK(cudaMemcpy(&v, b + (size_t)N * N * 5 + N * 5 + 5, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    size_t bytes = (size_t)N * N * N * 4;
    CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMemset(a, 0, bytes)); CK(cudaMemset(b, 0, bytes));
    bench_run("stencil3d", [] { dim3 bl(32, 8), g(N / 32, N / 8); st7<<<g, bl>>>(b, a, N); }, check);
}
