#include "bench.h"
__global__ void copy4(float4* d, const float4* s, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) d[i] = s[i];
}
static float4 *d, *s; static const size_t n = 8u << 20;
static double check() { float4 h; CK(cudaMemcpy(&h, d + 7, 16, cudaMemcpyDeviceToHost)); return h.x; }
int main() {
    CK(cudaMalloc(&d, n * 16)); CK(cudaMalloc(&s, n * 16)); CK(cudaMemset(s, 0, n * 16));
    bench_run("stream_copy_vec4", [] { copy4<<<(n + 255) / 256, 256>>>(d, s, n); }, check);
}
