// invalid_free_offset: cudaFree of a pointer 16 bytes into an allocation.
// ./invalid_free_offset runs the buggy variant, ./invalid_free_offset clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(N);
    cudaError_t e = cudaFree(clean ? p : p + 4);  // BUG:invalid_free_offset
    (void)e;
    return done();
}
