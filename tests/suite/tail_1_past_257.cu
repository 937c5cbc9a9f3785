// tail_1_past_257: a byte store one past a 257-byte buffer (heap overflow into the allocation's tail, 1 byte).
// ./tail_1_past_257 runs the buggy variant, ./tail_1_past_257 clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_bytes(unsigned char* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 7; }  // BUG:tail_1_past_257

int main(int argc, char** argv) {
    parse_args(argc, argv);
    unsigned char* p = dmalloc<unsigned char>(257);
    k_bytes<<<1, 512>>>(p, clean ? 257 : 258);
    SYNC();
    return done();
}
