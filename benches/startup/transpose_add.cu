// B = A^T through shared-memory tiles, then C = A + B; 4096². Two kernels.
#include "startup.h"
__global__ void transpose(const float* a, float* b, int n) {
    __shared__ float t[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int k = 0; k < 32; k += 8) t[threadIdx.y + k][threadIdx.x] = a[(size_t)(y + k) * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x; y = blockIdx.x * 32 + threadIdx.y;
    for (int k = 0; k < 32; k += 8) b[(size_t)(y + k) * n + x] = t[threadIdx.x][threadIdx.y + k];
}
__global__ void add(const float* a, const float* b, float* c, size_t n) { size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + 2 * b[i]; }
int main() {
    const int n = 4096;
    float *a = to_dev(rand_vec((size_t)n * n, 1)), *b, *c;
    CK(cudaMalloc(&b, (size_t)n * n * 4)); CK(cudaMalloc(&c, (size_t)n * n * 4));
    short_run("transpose_add", [&] { transpose<<<dim3(n / 32, n / 32), dim3(32, 8)>>>(a, b, n); add<<<n * n / 256, 256>>>(a, b, c, (size_t)n * n); }, [&] { return sum_dev(c, (size_t)n * n); });
}
