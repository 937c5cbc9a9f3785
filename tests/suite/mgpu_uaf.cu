// mgpu_uaf: a kernel on device 0 writes a freed buffer after device 1 (if present) ran its own kernel.
// ./mgpu_uaf runs the buggy variant, ./mgpu_uaf clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

// Multi-GPU-safe: with a second GPU, it gets its own buffer and kernel first (its memory is not
// gasan's); the bug is on device 0. With one GPU this is a plain single-GPU bug.
__global__ void k_write(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }
static void other_device_work() {
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) return;
    CK(cudaSetDevice(1));
    float* q = dmalloc<float>(N);
    k_write<<<4, 256>>>(q, N);
    SYNC();
    CK(cudaFree(q));
    CK(cudaSetDevice(0));
}

__global__ void k_mgpu(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 6.0f; }  // BUG:mgpu_uaf

int main(int argc, char** argv) {
    parse_args(argc, argv);
    CK(cudaSetDevice(0));
    float* p = dmalloc<float>(N);
    other_device_work();
    if (!clean) CK(cudaFree(p));
    k_mgpu<<<1, 32>>>(p, 0);
    SYNC();
    return done();
}
