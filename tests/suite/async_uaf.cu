// async_uaf: a kernel on a stream writes a buffer that cudaFreeAsync freed earlier on the same stream.
// ./async_uaf runs the buggy variant, ./async_uaf clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_write_at(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 9.0f; }  // BUG:async_uaf

int main(int argc, char** argv) {
    parse_args(argc, argv);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float* p;
    CK(cudaMallocAsync(&p, N * 4, s));
    if (!clean) CK(cudaFreeAsync(p, s));
    k_write_at<<<1, 32, 0, s>>>(p, 10);
    if (clean) CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    return done();
}
