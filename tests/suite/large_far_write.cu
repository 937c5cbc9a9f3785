// large_far_write: an int store 64 KiB past the end of a 4 MiB buffer (far heap overflow, write).
// ./large_far_write runs the buggy variant, ./large_far_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_int_at(int* p, long idx) { if (threadIdx.x == 0) p[idx] = 5; }  // BUG:large_far_write

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* p = dmalloc<int>(1 << 20);
    k_int_at<<<1, 32>>>(p, clean ? 5 : (1 << 20) + 16384);
    SYNC();
    return done();
}
