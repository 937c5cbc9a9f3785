#include "bench.h"
// Per-block shared-memory bins (atomics on shared), merged into the global histogram once per block.
#define BINS 1024
__global__ void histo_shared(unsigned* h, const unsigned* x, size_t n) {
    __shared__ unsigned bins[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        atomicAdd(&bins[x[i] % BINS], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) atomicAdd(&h[b], bins[b]);
}
static unsigned *h, *x; static const size_t n = 16u << 20;
static double check() { unsigned v; CK(cudaMemcpy(&v, h + 17, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    std::vector<unsigned> hx(n); unsigned s = 7; for (auto& v : hx) v = lcg(s) >> 4;
    CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&h, BINS * 4));
    CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
    bench_run("histogram_shared", [] { CK(cudaMemsetAsync(h, 0, BINS * 4)); histo_shared<<<528, 256>>>(h, x, n); }, check);
}
