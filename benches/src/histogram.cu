#include "bench.h"
__global__ void histo(unsigned* h, const unsigned* x, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&h[x[i] % 4096], 1u);
}
static unsigned *h, *x; static const size_t n = 16u << 20;
static double check() { unsigned v; CK(cudaMemcpy(&v, h + 17, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    std::vector<unsigned> hx(n); unsigned s = 7; for (auto& v : hx) v = lcg(s) >> 4;
    CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&h, 4096 * 4));
    CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
    bench_run("histogram_atomics", [] { CK(cudaMemsetAsync(h, 0, 4096 * 4)); histo<<<(n + 255) / 256, 256>>>(h, x, n); }, check);
}
