// tail_4_past_100: an int store at index 25 of a 100-byte (25-int) buffer (heap overflow, write, 4 bytes).
// ./tail_4_past_100 runs the buggy variant, ./tail_4_past_100 clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_int_at(int* p, long idx) { if (threadIdx.x == 0) p[idx] = 5; }  // BUG:tail_4_past_100

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* p = dmalloc<int>(25);
    k_int_at<<<1, 32>>>(p, clean ? 24 : 25);
    SYNC();
    return done();
}
