// memcpy_h2d_overflow: a host-to-device cudaMemcpy 256 bytes larger than the device buffer.
// ./memcpy_h2d_overflow runs the buggy variant, ./memcpy_h2d_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<float> h(N + 64);
    float* p = dmalloc<float>(N);
    CK(cudaMemcpy(p, h.data(), (clean ? N : N + 64) * 4, cudaMemcpyHostToDevice));  // BUG:memcpy_h2d_overflow
    return done();
}
