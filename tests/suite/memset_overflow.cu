// memset_overflow: a cudaMemset 32 bytes larger than the buffer.
// ./memset_overflow runs the buggy variant, ./memset_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(N);
    CK(cudaMemset(p, 0, (clean ? N : N + 8) * 4));  // BUG:memset_overflow
    SYNC();
    return done();
}
