#include "bench.h"
__global__ void touch(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = i; }
static double sum = 0;
static double check() { return sum; }
int main() {
    bench_run("alloc_storm", [] {
        for (int i = 0; i < 500; i++) {
            float* p; int n = 64 + (i * 97) % 4096;
            CK(cudaMalloc(&p, n * 4));
            touch<<<(n + 127) / 128, 128>>>(p, n);
            CK(cudaFree(p));
            sum += n;
        }
    }, check);
}
