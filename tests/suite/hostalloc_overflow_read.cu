// hostalloc_overflow_read: a zero-copy kernel sums a mapped pinned host buffer (cudaHostAlloc) and
// reads one element past its end.
// ./hostalloc_overflow_read runs the buggy variant, ./hostalloc_overflow_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_sum_mapped(const float* v, int n, float* out) {
    float s = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += v[i];  // BUG:hostalloc_overflow_read
    atomicAdd(out, s);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 2000;
    float *h, *dh, *out = dmalloc<float>(1);
    CK(cudaHostAlloc(&h, n * sizeof(float), cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dh, h, 0));
    for (int i = 0; i < n; i++) h[i] = 1.0f;
    k_sum_mapped<<<4, 128>>>(dh, clean ? n : n + 1, out);
    SYNC();
    float got;
    CK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    if (clean && got != (float)n) { printf("wrong sum %g\n", got); return 4; }
    CK(cudaFreeHost(h));
    return done();
}
