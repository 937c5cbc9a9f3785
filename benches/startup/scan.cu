// Inclusive prefix sum of 4 M ints: per-block scans, a scan of the block sums, then the add-back.
#include "startup.h"
__device__ void block_scan(int* s) {
    for (int off = 1; off < 1024; off <<= 1) { int v = threadIdx.x >= off ? s[threadIdx.x - off] : 0; __syncthreads(); s[threadIdx.x] += v; __syncthreads(); }
}
__global__ void scan_blocks(const int* in, int* out, int* sums, int n) {
    __shared__ int s[1024];
    int i = blockIdx.x * 1024 + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : 0; __syncthreads();
    block_scan(s);
    if (i < n) out[i] = s[threadIdx.x];
    if (threadIdx.x == 1023) sums[blockIdx.x] = s[1023];
}
__global__ void scan_sums(int* sums, int m) {
    __shared__ int s[1024];
    int carry = 0;
    for (int base = 0; base < m; base += 1024) {
        int i = base + threadIdx.x;
        s[threadIdx.x] = i < m ? sums[i] : 0; __syncthreads();
        block_scan(s);
        if (i < m) sums[i] = s[threadIdx.x] + carry;
        carry += s[1023]; __syncthreads();
    }
}
__global__ void add_back(int* out, const int* sums, int n) {
    int i = blockIdx.x * 1024 + threadIdx.x;
    if (blockIdx.x > 0 && i < n) out[i] += sums[blockIdx.x - 1];
}
int main() {
    const int n = 1 << 22, m = n / 1024;
    std::vector<int> h(n); unsigned sd = 7; for (auto& v : h) v = lcg(sd) % 5;
    int *in = to_dev(h), *out, *sums;
    CK(cudaMalloc(&out, n * 4)); CK(cudaMalloc(&sums, m * 4));
    short_run("scan", [&] { scan_blocks<<<m, 1024>>>(in, out, sums, n); scan_sums<<<1, 1024>>>(sums, m); add_back<<<m, 1024>>>(out, sums, n); }, [&] { return sum_dev(out, n); });
}
