#include "bench.h"
// Local-memory heavy: each thread insertion-sorts 32 keys in a thread-local array (dynamic
// indexing keeps it in local memory) and writes its median.
#define K 32
__global__ void local_sort(float* o, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v[K];
    for (int k = 0; k < K; k++) v[k] = in[(i + k * 977) % n];
    for (int k = 1; k < K; k++) {
        float x = v[k]; int j = k - 1;
        while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j--; }
        v[j + 1] = x;
    }
    o[i] = v[K / 2];
}
int main() {
    const int n = 1 << 20;
    bench_map("local_sort", n, 3, [=](float* o, const float* in) { local_sort<<<n / 256, 256>>>(o, in, n); });
}
