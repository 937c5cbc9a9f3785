#include "bench.h"
// A long multi-kernel pipeline: normalize → blur → threshold → count, repeated over frames.
__global__ void normalize(float* o, const float* in, int n, float s) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = in[i] * s; }
__global__ void blur(float* o, const float* in, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i > 0 && i < n - 1) o[i] = (in[i - 1] + in[i] + in[i + 1]) / 3; }
__global__ void thresh(int* o, const float* in, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = in[i] > 0.5f; }
__global__ void count(unsigned* c, const int* in, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n && in[i]) atomicAdd(c, 1u); }
static float *f0, *f1, *f2; static int* m; static unsigned* c; static const int n = 4 << 20;
static double check() { unsigned v; CK(cudaMemcpy(&v, c, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    CK(cudaMalloc(&f0, n * 4)); CK(cudaMalloc(&f1, n * 4)); CK(cudaMalloc(&f2, n * 4)); CK(cudaMalloc(&m, n * 4)); CK(cudaMalloc(&c, 4));
    std::vector<float> h(n); unsigned s = 19; for (auto& v : h) v = (lcg(s) >> 8) * 1.2e-7f;
    CK(cudaMemcpy(f0, h.data(), n * 4, cudaMemcpyHostToDevice));
    bench_run("pipeline", [] {
        CK(cudaMemsetAsync(c, 0, 4));
        for (int fr = 0; fr < 20; fr++) {
            normalize<<<n / 256, 256>>>(f1, f0, n, 0.9f); blur<<<n / 256, 256>>>(f2, f1, n);
            thresh<<<n / 256, 256>>>(m, f2, n); count<<<n / 256, 256>>>(c, m, n);
        }
    }, check);
}
