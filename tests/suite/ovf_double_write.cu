// ovf_double_write: a double store one element past the buffer (heap overflow, write, 8 bytes).
// ./ovf_double_write runs the buggy variant, ./ovf_double_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_double(double* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 2.0; }  // BUG:ovf_double_write

int main(int argc, char** argv) {
    parse_args(argc, argv);
    double* p = dmalloc<double>(100);
    k_double<<<1, 128>>>(p, clean ? 100 : 101);
    SYNC();
    return done();
}
