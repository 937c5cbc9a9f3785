// far_read_1mib: a float load 1 MiB past the end of a 4000-byte buffer (far heap overflow, read).
// ./far_read_1mib runs the buggy variant, ./far_read_1mib clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_read_at(float* o, const float* p, long idx) { if (threadIdx.x == 0) o[0] = p[idx]; }  // BUG:far_read_1mib

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *p = dmalloc<float>(N), *o = dmalloc<float>(1);
    k_read_at<<<1, 32>>>(o, p, clean ? 5 : (1 << 18) + N);
    SYNC();
    return done();
}
