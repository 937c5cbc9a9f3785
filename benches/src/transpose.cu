#include "bench.h"
#define T 32
__global__ void transpose(float* o, const float* in, int n) {
    __shared__ float t[T][T + 1];
    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
    for (int j = 0; j < T; j += 8) t[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * T + threadIdx.x; y = blockIdx.x * T + threadIdx.y;
    for (int j = 0; j < T; j += 8) o[(y + j) * n + x] = t[threadIdx.x][threadIdx.y + j];
}
static float *a, *b; static const int N = 8192;
static double check() { float v; CK(cudaMemcpy(&v, b + 3 * N + 5, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    CK(cudaMalloc(&a, (size_t)N * N * 4)); CK(cudaMalloc(&b, (size_t)N * N * 4)); CK(cudaMemset(a, 0, (size_t)N * N * 4));
    bench_run("transpose", [] { transpose<<<dim3(N / T, N / T), dim3(T, 8)>>>(b, a, N); }, check);
}
