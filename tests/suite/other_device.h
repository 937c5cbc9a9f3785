// Shared by the multi-GPU-safe suite programs: with a second GPU, it gets its own buffer and kernel
// first (its memory is not gasan's); the bug stays on device 0. With one GPU this does nothing and
// the program is a plain single-GPU bug.
#pragma once
#include "common.h"

__global__ void k_fill_other(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }

static void other_device_work() {
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) return;
    CK(cudaSetDevice(1));
    float* q = dmalloc<float>(N);
    k_fill_other<<<4, 256>>>(q, N);
    SYNC();
    CK(cudaFree(q));
    CK(cudaSetDevice(0));
}
