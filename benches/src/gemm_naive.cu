#include "bench.h"
__global__ void gemm(float* C, const float* A, const float* B, int n) {
    int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n || c >= n) return;
    float acc = 0;
    for (int k = 0; k < n; k++) acc += A[r * n + k] * B[k * n + c];
    C[r * n + c] = acc;
}
static float *A, *B, *C; static const int N = 1024;
static double check() { float v; CK(cudaMemcpy(&v, C + 5 * N + 7, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    std::vector<float> h(N * N); unsigned s = 3; for (auto& v : h) v = (lcg(s) >> 8) * 1e-7f;
    CK(cudaMalloc(&A, N * N * 4)); CK(cudaMalloc(&B, N * N * 4)); CK(cudaMalloc(&C, N * N * 4));
    CK(cudaMemcpy(A, h.data(), N * N * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(B, h.data(), N * N * 4, cudaMemcpyHostToDevice));
    bench_run("gemm_naive", [] { gemm<<<dim3(N / 16, N / 16), dim3(16, 16)>>>(C, A, B, N); }, check);
}
