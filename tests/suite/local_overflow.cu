// local_overflow: a store one past a thread-local array.
// ./local_overflow runs the buggy variant, ./local_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_local(float* o, int idx) { float l[16]; for (int i = 0; i < 16; i++) l[i] = o[i]; l[idx] = 1; o[0] = l[(idx + 3) & 15]; }  // BUG:local_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* o = dmalloc<float>(16);
    k_local<<<1, 1>>>(o, clean ? 15 : 16);
    SYNC();
    return done();
}
