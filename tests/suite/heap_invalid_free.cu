// heap_invalid_free: a kernel advances its device-heap pointer past a header and frees the advanced
// pointer instead of the block's start.
// ./heap_invalid_free runs the buggy variant, ./heap_invalid_free clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_message(int* out, int skip) {
    int* block = (int*)malloc(64 * sizeof(int));
    if (!block) return;
    int* body = block + 4;   // past a 4-int header
    for (int i = 0; i < 60; ++i) body[i] = i;
    out[0] = body[59];
    free(block + skip);  // BUG:heap_invalid_free
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* out = dmalloc<int>(1);
    k_message<<<1, 1>>>(out, clean ? 0 : 4);
    SYNC();
    return done();
}
