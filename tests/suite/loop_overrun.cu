// loop_overrun: a serial reduction whose loop bound is inclusive (off-by-one read past the input).
// ./loop_overrun runs the buggy variant, ./loop_overrun clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_reduce(float* out, const float* in, int n, int inclusive) {
    float s = 0;
    for (int i = 0; i < n + inclusive; i++) s += in[i];  // BUG:loop_overrun
    *out = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *p = dmalloc<float>(N), *o = dmalloc<float>(1);
    k_reduce<<<1, 1>>>(o, p, N, clean ? 0 : 1);
    SYNC();
    return done();
}
