// STREAM triad over managed memory (cudaMallocManaged, prefetched to the GPU): the steady-state
// cost of kernels on managed memory. Under gasan (managed_memory=1) the arrays are pinned host
// memory in the pool, read across the bus: this benchmark shows that price.
#include "bench.h"
__global__ void triad(float* a, const float* b, const float* c, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + s * c[i];
}
static float *a, *b, *c;
static const int n = 1 << 22;
static double check() {
    CK(cudaDeviceSynchronize());
    double s = 0;
    for (int i = 0; i < n; i += 4099) s += a[i];
    return s;
}
int main() {
    CK(cudaMallocManaged(&a, n * 4)); CK(cudaMallocManaged(&b, n * 4)); CK(cudaMallocManaged(&c, n * 4));
    for (int i = 0; i < n; i++) { a[i] = 0; b[i] = i % 13; c[i] = i % 7; }
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0};
    for (float* p : {a, b, c}) CK(cudaMemPrefetchAsync(p, n * 4, gpu, 0, 0));
    bench_run("managed_triad", [] { triad<<<n / 256, 256>>>(a, b, c, 3.0f, n); }, check);
}
