// gasan first programs: a use after free. The buffer is freed after the first kernel, and a
// second launch still uses the old pointer (a forgotten line when the free moved up).
// Build: examples/build.sh      Run: target/release/gasan-run -- examples/out/use_after_free
// Expected report: examples/expected/use_after_free.txt
#include <cstdio>
#include <cuda_runtime.h>

__global__ void scale(float* v, int n, float f) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] * f;  // BUG (second launch): v was freed by cudaFree below
}

int main() {
    const int n = 1000;
    float* d = nullptr;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 2; }
    cudaMemset(d, 0, n * sizeof(float));
    scale<<<(n + 255) / 256, 256>>>(d, n, 2.0f);
    cudaDeviceSynchronize();
    cudaFree(d);
    scale<<<(n + 255) / 256, 256>>>(d, n, 0.5f);  // d is dangling here
    cudaError_t e = cudaDeviceSynchronize();
    printf("kernel finished: %s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 3;
}
