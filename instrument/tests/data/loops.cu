// Loop shapes for the loop-versioning tests (instrument/src/ptx/loops.rs): the PTX nvcc makes of
// them is committed next to this file as loops.ptx (regenerate with
// `nvcc -O3 -arch=sm_90 -ptx loops.cu -o loops.ptx` from the pinned toolchain).
#include <cstddef>

__global__ void count_up(float* a, int n) {
    for (int i = 0; i < n; i++) a[i] += 1.0f;
}
__global__ void step3(float* a, const float* b, int s, int e) {
#pragma unroll 1
    for (int i = s; i < e; i += 3) a[i] = b[i] * 2.0f;
}
__global__ void count_down(float* a, int n) {
#pragma unroll 1
    for (int i = n - 1; i >= 0; i--) a[i] = a[i] * 0.5f;
}
__global__ void unsigned_le(unsigned* a, unsigned lo, unsigned hi) {
#pragma unroll 1
    for (unsigned i = lo; i <= hi; i += 2) a[i] = i;
}
__global__ void gemm_row(float* C, const float* A, const float* B, int n) {
    int r = blockIdx.y, c = threadIdx.x;
    float acc = 0;
    for (int k = 0; k < n; k++) acc += A[r * n + k] * B[k * n + c];
    C[r * n + c] = acc;
}
__global__ void grid_stride(float* a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] *= 2.0f;
}
__global__ void stencil_z(float* o, const float* in, int n) {
    int x = threadIdx.x + 1, y = blockIdx.x + 1;
    for (int z = 1; z < n - 1; z++) {
        size_t i = ((size_t)z * n + y) * n + x;
        o[i] = in[i] + in[i - 1] + in[i + 1] + in[i - n] + in[i + n] + in[i - (size_t)n * n] + in[i + (size_t)n * n];
    }
}
__global__ void csr_row(float* y, const int* rp, const int* ci, const float* v, const float* x) {
    int r = threadIdx.x;
    float acc = 0;
    for (int k = rp[r]; k < rp[r + 1]; k++) acc += v[k] * x[ci[k]];
    y[r] = acc;
}
__global__ void pointer_walk(int* p, int* end) {
#pragma unroll 1
    while (p < end) *p++ = 7;
}
__global__ void wide_ne(double* a, size_t start, size_t end) {
#pragma unroll 1
    for (size_t i = start; i != end; i += 4) a[i] = 1.0;
}
__global__ void atomics(int* bins, const int* idx, int n) {
#pragma unroll 1
    for (int i = 0; i < n; i++) atomicAdd(&bins[i & 255], idx[i]);
}
