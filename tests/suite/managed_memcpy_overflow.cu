// managed_memcpy_overflow: cudaMemcpy copies a whole host array into a cudaMallocManaged buffer
// sized for fewer elements.
// ./managed_memcpy_overflow runs the buggy variant, ./managed_memcpy_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<float> host(1024, 1.0f);
    float* m;
    CK(cudaMallocManaged(&m, 1000 * sizeof(float)));
    size_t count = clean ? 1000 : host.size();
    CK(cudaMemcpy(m, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));  // BUG:managed_memcpy_overflow
    SYNC();
    return done();
}
