#include "bench.h"
#define T 32
__global__ void gemm(float* C, const float* A, const float* B, int n) {
    __shared__ float a[T][T], b[T][T];
    int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
    float acc = 0;
    for (int k0 = 0; k0 < n; k0 += T) {
        a[threadIdx.y][threadIdx.x] = A[r * n + k0 + threadIdx.x];
        b[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + c];
        __syncthreads();
        for (int k = 0; k < T; k++) acc += a[threadIdx.y][k] * b[k][threadIdx.x];
        __syncthreads();
    }
    C[r * n + c] = acc;
}
static float *A, *B, *C; static const int N = 2048;
static double check() { float v; CK(cudaMemcpy(&v, C + 5 * N + 7, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    std::vector<float> h(N * N); unsigned s = 5; for (auto& v : h) v = (lcg(s) >> 8) * 1e-7f;
    CK(cudaMalloc(&A, N * N * 4)); CK(cudaMalloc(&B, N * N * 4)); CK(cudaMalloc(&C, N * N * 4));
    CK(cudaMemcpy(A, h.data(), N * N * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(B, h.data(), N * N * 4, cudaMemcpyHostToDevice));
    bench_run("gemm_tiled", [] { gemm<<<dim3(N / T, N / T), dim3(T, T)>>>(C, A, B, N); }, check);
}
