// underflow_read: a read at index -1, just before the buffer (heap underflow, read, 4 bytes).
// ./underflow_read runs the buggy variant, ./underflow_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_read_at(float* o, const float* p, long idx) { if (threadIdx.x == 0) o[0] = p[idx]; }  // BUG:underflow_read

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *a = dmalloc<float>(N), *p = dmalloc<float>(N), *o = dmalloc<float>(1);
    (void)a;
    k_read_at<<<1, 32>>>(o, p, clean ? 0 : -1);
    SYNC();
    return done();
}
