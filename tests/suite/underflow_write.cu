// underflow_write: a write at index -16, 64 bytes before the buffer (heap underflow, write, 4 bytes).
// ./underflow_write runs the buggy variant, ./underflow_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_int_at(int* p, long idx) { if (threadIdx.x == 0) p[idx] = 5; }  // BUG:underflow_write

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int *a = dmalloc<int>(N), *p = dmalloc<int>(N);
    (void)a;
    k_int_at<<<1, 32>>>(p, clean ? 0 : -16);
    SYNC();
    return done();
}
