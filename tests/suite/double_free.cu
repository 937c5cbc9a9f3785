// double_free: cudaFree twice on a 4000-byte buffer.
// ./double_free runs the buggy variant, ./double_free clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(N);
    CK(cudaFree(p));
    if (!clean) cudaFree(p);  // BUG:double_free
    CK(cudaDeviceSynchronize());
    return done();
}
