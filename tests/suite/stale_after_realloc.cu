// stale_after_realloc: a scratch buffer is reset (freed and allocated again at the same size) but a kernel still writes through the pointer cached before the reset (use after free, write).
// ./stale_after_realloc runs the buggy variant, ./stale_after_realloc clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

struct Scratch { float* p; int n; };

// Frees the scratch and allocates a fresh one of the same size (natively: usually the same address).
static void scratch_reset(Scratch& s) {
    CK(cudaFree(s.p));
    CK(cudaMalloc(&s.p, s.n * sizeof(float)));
}

__global__ void k_scale(float* dst, const float* src, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = a * src[i];  // BUG:stale_after_realloc
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 4096;
    float* src = dmalloc<float>(n);
    Scratch s{dmalloc<float>(n), n};
    float* work = s.p;                       // cached by the caller
    k_scale<<<n / 256, 256>>>(work, src, 1.0f, n);
    SYNC();
    scratch_reset(s);                        // the cached pointer is now stale
    if (clean) work = s.p;
    k_scale<<<n / 256, 256>>>(work, src, 2.0f, n);
    SYNC();
    CK(cudaFree(s.p));
    CK(cudaFree(src));
    return done();
}
