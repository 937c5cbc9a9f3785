// ovf_vector_write: a float4 (vector) store one element past the buffer (heap overflow, write, 16 bytes).
// ./ovf_vector_write runs the buggy variant, ./ovf_vector_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_vec_write(float4* p, int n) { int i = threadIdx.x; if (i < n) p[i] = make_float4(1, 2, 3, 4); }  // BUG:ovf_vector_write

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float4* p = dmalloc<float4>(100);
    k_vec_write<<<1, 128>>>(p, clean ? 100 : 101);
    SYNC();
    return done();
}
