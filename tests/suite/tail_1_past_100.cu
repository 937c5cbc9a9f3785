// tail_1_past_100: a byte store one past a 100-byte buffer (heap overflow into the allocation's tail, 1 byte).
// ./tail_1_past_100 runs the buggy variant, ./tail_1_past_100 clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_bytes(unsigned char* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 7; }  // BUG:tail_1_past_100

int main(int argc, char** argv) {
    parse_args(argc, argv);
    unsigned char* p = dmalloc<unsigned char>(100);
    k_bytes<<<1, 128>>>(p, clean ? 100 : 101);
    SYNC();
    return done();
}
