// heap_free_next_kernel: device-heap buffers outlive their kernel: one kernel allocates them, a
// second frees them, and a third still reads through the saved pointers.
// ./heap_free_next_kernel runs the buggy variant, ./heap_free_next_kernel clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ int* g_bufs[8];

__global__ void k_make() { int* p = (int*)malloc(32 * sizeof(int)); if (p) for (int i = 0; i < 32; ++i) p[i] = i; g_bufs[threadIdx.x] = p; }
__global__ void k_release() { free(g_bufs[threadIdx.x]); }
__global__ void k_consume(int* out) { int* p = g_bufs[threadIdx.x]; if (p) out[threadIdx.x] = p[7]; }  // BUG:heap_free_next_kernel

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* out = dmalloc<int>(8);
    k_make<<<1, 8>>>();
    SYNC();
    if (clean) { k_consume<<<1, 8>>>(out); SYNC(); }
    k_release<<<1, 8>>>();
    SYNC();
    if (!clean) { k_consume<<<1, 8>>>(out); SYNC(); }
    return done();
}
