// memcpy_d2h_overflow: a device-to-host cudaMemcpy 256 bytes larger than the device buffer.
// ./memcpy_d2h_overflow runs the buggy variant, ./memcpy_d2h_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<float> h(N + 64);
    float* p = dmalloc<float>(N);
    CK(cudaMemcpy(h.data(), p, (clean ? N : N + 64) * 4, cudaMemcpyDeviceToHost));  // BUG:memcpy_d2h_overflow
    return done();
}
