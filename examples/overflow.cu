// gasan quick start: one planted heap-buffer-overflow. The kernel writes n + 1 elements into an
// n-element buffer (the launch has one thread too many and the bounds test is off by one).
// Build: examples/build.sh      Run: target/release/gasan-run -- examples/out/overflow
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f * i;  // BUG: i == n writes one element past the end
}

int main() {
    const int n = 1000;
    float* d = nullptr;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 2; }
    fill<<<(n + 1 + 255) / 256, 256>>>(d, n);
    cudaError_t e = cudaDeviceSynchronize();
    printf("kernel finished: %s\n", cudaGetErrorString(e));
    cudaFree(d);
    return e == cudaSuccess ? 0 : 3;
}
