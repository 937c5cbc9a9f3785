// memcpy_d2d_overflow: a device-to-device cudaMemcpy 400 bytes larger than the destination.
// ./memcpy_d2d_overflow runs the buggy variant, ./memcpy_d2d_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *a = dmalloc<float>(N), *b = dmalloc<float>(2 * N);
    CK(cudaMemcpy(a, b, (clean ? N : N + 100) * 4, cudaMemcpyDeviceToDevice));  // BUG:memcpy_d2d_overflow
    SYNC();
    return done();
}
