// memcpy_after_free: a device-to-host cudaMemcpy from a freed buffer.
// ./memcpy_after_free runs the buggy variant, ./memcpy_after_free clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<float> h(N);
    float* p = dmalloc<float>(N);
    CK(cudaFree(p));
    if (clean) p = dmalloc<float>(N);
    CK(cudaMemcpy(h.data(), p, N * 4, cudaMemcpyDeviceToHost));  // BUG:memcpy_after_free
    return done();
}
