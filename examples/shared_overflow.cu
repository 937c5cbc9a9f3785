// gasan first programs: a shared-memory overflow. Each block stages 256 inputs in a __shared__
// tile and averages every element with its right neighbour; the last thread of each block reads
// tile[256], one past the tile (the halo element was never loaded).
// Build: examples/build.sh      Run: target/release/gasan-run -- examples/out/shared_overflow
// Expected report: examples/expected/shared_overflow.txt
#include <cstdio>
#include <cuda_runtime.h>

#define TILE 256

__global__ void smooth(const float* in, float* out, int n) {
    __shared__ float tile[TILE];
    int i = blockIdx.x * TILE + threadIdx.x;
    tile[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    if (i < n) out[i] = 0.5f * (tile[threadIdx.x] + tile[threadIdx.x + 1]);  // BUG: threadIdx.x == TILE - 1 reads tile[TILE]
}

int main() {
    const int n = 4 * TILE;
    float *in = nullptr, *out = nullptr;
    if (cudaMalloc(&in, n * sizeof(float)) != cudaSuccess || cudaMalloc(&out, n * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc failed\n");
        return 2;
    }
    cudaMemset(in, 0, n * sizeof(float));
    smooth<<<n / TILE, TILE>>>(in, out, n);
    cudaError_t e = cudaDeviceSynchronize();
    printf("kernel finished: %s\n", cudaGetErrorString(e));
    cudaFree(in);
    cudaFree(out);
    return e == cudaSuccess ? 0 : 3;
}
