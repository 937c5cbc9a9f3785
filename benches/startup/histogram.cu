// 256-bin histogram of 16 M bytes with shared-memory atomics, then its cumulative distribution.
#include "startup.h"
__global__ void zero(unsigned* bins) { bins[threadIdx.x] = 0; }
__global__ void hist(const unsigned char* d, unsigned* bins, int n) {
    __shared__ unsigned s[256];
    s[threadIdx.x] = 0; __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(&s[d[i]], 1u);
    __syncthreads();
    atomicAdd(&bins[threadIdx.x], s[threadIdx.x]);
}
__global__ void cdf(const unsigned* bins, float* out, int n) {
    if (threadIdx.x == 0) { unsigned acc = 0; for (int b = 0; b < 256; b++) { acc += bins[b]; out[b] = (float)acc / n; } }
}
int main() {
    const int n = 1 << 24;
    std::vector<unsigned char> h(n); unsigned sd = 3; for (auto& v : h) v = (lcg(sd) >> 24) & 0xff;
    unsigned char* d = to_dev(h); unsigned* bins; float* out;
    CK(cudaMalloc(&bins, 256 * 4)); CK(cudaMalloc(&out, 256 * 4));
    short_run("histogram", [&] { zero<<<1, 256>>>(bins); hist<<<1024, 256>>>(d, bins, n); cdf<<<1, 32>>>(bins, out, n); }, [&] { return sum_dev(out, 256); });
}
