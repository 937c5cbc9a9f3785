#include "bench.h"
// Call-heavy: a non-inlined function, called 16 times in each thread's loop, reads the caller's
// local array through a pointer and a global row through another, and keeps a local array of its
// own. Its accesses not computed from its own frame are checked against the end of its callers'
// frames (instrument/src/ptx/frames.rs) on top of the usual checks: what that costs.
#define W 8
__device__ __noinline__ float blend(const float* w, const float* x, int shift) {
    float t[W];
    for (int k = 0; k < W; k++) t[(k + shift) & (W - 1)] = w[k] * x[k];
    float s = 0;
    for (int k = 0; k < W; k++) s += t[k] * (k + 1);
    return s;
}
__global__ void calls(float* o, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float w[W];
    for (int k = 0; k < W; k++) w[k] = in[(i * 7 + k) % n];
    float acc = 0;
    for (int r = 0; r < 16; r++) {
        acc += blend(w, in + (i + r * 131) % (n - W), r);
        w[r & (W - 1)] += acc * 1e-3f;
    }
    o[i] = acc;
}
int main() {
    const int n = 1 << 20;
    bench_map("calls", n, 5, [=](float* o, const float* in) { calls<<<n / 256, 256>>>(o, in, n); });
}
