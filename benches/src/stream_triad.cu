#include "bench.h"
__global__ void triad(float* a, const float* b, const float* c, float s, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + s * c[i];
}
static float *a, *b, *c; static const size_t n = 32u << 20;
static double check() { float h; CK(cudaMemcpy(&h, a + 12345, 4, cudaMemcpyDeviceToHost)); return h; }
int main() {
    CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, n * 4)); CK(cudaMalloc(&c, n * 4));
    CK(cudaMemset(b, 0, n * 4)); CK(cudaMemset(c, 0, n * 4));
    bench_run("stream_triad", [] { triad<<<(n + 255) / 256, 256>>>(a, b, c, 3.0f, n); }, check);
}
