// far_write_64k: an int store 64 KiB past the end of a 4000-byte buffer (far heap overflow, write).
// ./far_write_64k runs the buggy variant, ./far_write_64k clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_int_at(int* p, long idx) { if (threadIdx.x == 0) p[idx] = 5; }  // BUG:far_write_64k

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* p = dmalloc<int>(N);
    k_int_at<<<1, 32>>>(p, clean ? 5 : 16384 + N);
    SYNC();
    return done();
}
