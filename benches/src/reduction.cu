#include "bench.h"
__global__ void reduce(float* out, const float* in, size_t n) {
    __shared__ float s[256];
    float acc = 0;
    for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t)gridDim.x * 256) acc += in[i];
    s[threadIdx.x] = acc; __syncthreads();
    for (int w = 128; w > 0; w >>= 1) { if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w]; __syncthreads(); }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
static float *in, *out; static const size_t n = 32u << 20;
static double check() { float v; CK(cudaMemcpy(&v, out, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    CK(cudaMalloc(&in, n * 4)); CK(cudaMalloc(&out, 4));
    std::vector<float> h(n, 1.0f); CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
    bench_run("reduction", [] { CK(cudaMemsetAsync(out, 0, 4)); reduce<<<1024, 256>>>(out, in, n); }, check);
}
