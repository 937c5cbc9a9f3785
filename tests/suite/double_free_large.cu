// double_free_large: cudaFree twice on a 16 MiB buffer.
// ./double_free_large runs the buggy variant, ./double_free_large clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(4 << 20);
    CK(cudaFree(p));
    if (!clean) cudaFree(p);  // BUG:double_free_large
    CK(cudaDeviceSynchronize());
    return done();
}
