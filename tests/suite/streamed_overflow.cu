// streamed_overflow: an elementwise write kernel on a created stream, one element past the buffer.
// ./streamed_overflow runs the buggy variant, ./streamed_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_write(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }  // BUG:streamed_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float* p = dmalloc<float>(N);
    k_write<<<4, 256, 0, s>>>(p, clean ? N : N + 1);
    CK(cudaStreamSynchronize(s));
    return done();
}
