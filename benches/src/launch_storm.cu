#include "bench.h"
__global__ void tiny(float* p) { p[threadIdx.x] += 1.0f; }
static float* p;
static double check() { float v; CK(cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost)); return v; }
int main() {
    CK(cudaMalloc(&p, 128 * 4)); CK(cudaMemset(p, 0, 128 * 4));
    bench_run("launch_storm", [] { for (int i = 0; i < 2000; i++) tiny<<<1, 128>>>(p); }, check);
}
