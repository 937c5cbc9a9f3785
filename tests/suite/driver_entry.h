// Driver API entry points for suite programs built with nvcc's static cudart alone (no -lcuda):
// resolved through cudaGetDriverEntryPointByVersion, the path cudart itself takes, so gasan's
// interposer sees these calls as it sees cudart's.
#pragma once
#include <cuda.h>
#include "common.h"

template <class F> static F driver_fn(const char* name, unsigned version = 13000) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) { fprintf(stderr, "driver entry point %s not found (%d)\n", name, (int)q); exit(3); }
    return (F)fn;
}

#define CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "CUDA driver error %d at %s:%d\n", (int)r_, __FILE__, __LINE__); exit(3); } } while (0)
