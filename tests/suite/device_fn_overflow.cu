// device_fn_overflow: the overflowing store is in a non-inlined __device__ function called by the kernel.
// ./device_fn_overflow runs the buggy variant, ./device_fn_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ __noinline__ void store(float* p, int i) { p[i] = 3.0f; }  // BUG:device_fn_overflow
__global__ void k_devfn(float* p, int n) { int i = threadIdx.x; if (i < n) store(p, i); }

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(100);
    k_devfn<<<1, 128>>>(p, clean ? 100 : 101);
    SYNC();
    return done();
}
