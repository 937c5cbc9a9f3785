#include "bench.h"
__global__ void gather(float* o, const float* in, const int* idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = in[idx[i]];
}
__global__ void scatter(float* o, const float* in, const int* idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[idx[i]] = in[i];
}
static float *a, *b; static int* idx; static const int n = 16 << 20;
static double check() { float v; CK(cudaMemcpy(&v, b + 99, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    std::vector<int> p(n); for (int i = 0; i < n; i++) p[i] = i; unsigned s = 11;
    for (int i = n - 1; i > 0; i--) std::swap(p[i], p[lcg(s) % (i + 1)]);
    CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, n * 4)); CK(cudaMalloc(&idx, n * 4));
    CK(cudaMemcpy(idx, p.data(), n * 4, cudaMemcpyHostToDevice)); CK(cudaMemset(a, 0, n * 4));
    bench_run("gather_scatter", [] { gather<<<n / 256, 256>>>(b, a, idx, n); scatter<<<n / 256, 256>>>(a, b, idx, n); }, check);
}
