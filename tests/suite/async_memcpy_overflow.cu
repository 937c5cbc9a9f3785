// async_memcpy_overflow: a cudaMemcpyAsync 128 bytes larger than a cudaMallocAsync buffer.
// ./async_memcpy_overflow runs the buggy variant, ./async_memcpy_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    std::vector<float> h(N + 32);
    float* p;
    CK(cudaMallocAsync(&p, N * 4, s));
    CK(cudaMemcpyAsync(p, h.data(), (clean ? N : N + 32) * 4, cudaMemcpyHostToDevice, s));  // BUG:async_memcpy_overflow
    CK(cudaStreamSynchronize(s));
    return done();
}
