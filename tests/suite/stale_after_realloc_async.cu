// stale_after_realloc_async: a stream-ordered frame pipeline recycles the previous frame (cudaFreeAsync, then cudaMallocAsync of the next) before the temporal blend reads it (use after free, read).
// ./stale_after_realloc_async runs the buggy variant, ./stale_after_realloc_async clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_produce(float* frame, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) frame[i] = v + i;
}

__global__ void k_blend(float* out, const float* cur, const float* prev, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.75f * cur[i] + 0.25f * prev[i];  // BUG:stale_after_realloc_async
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 8192;
    const size_t bytes = n * sizeof(float);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float *out, *frame;
    CK(cudaMallocAsync(&out, bytes, s));
    CK(cudaMallocAsync(&frame, bytes, s));
    k_produce<<<n / 256, 256, 0, s>>>(frame, 1.0f, n);
    float* prev = frame;                              // kept for the temporal blend
    if (!clean) CK(cudaFreeAsync(prev, s));           // recycled one frame too early
    CK(cudaMallocAsync(&frame, bytes, s));            // the next frame (natively: the same address)
    k_produce<<<n / 256, 256, 0, s>>>(frame, 2.0f, n);
    k_blend<<<n / 256, 256, 0, s>>>(out, frame, prev, n);
    if (clean) CK(cudaFreeAsync(prev, s));
    CK(cudaFreeAsync(frame, s));
    CK(cudaFreeAsync(out, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaStreamDestroy(s));
    return done();
}
