// ovf_vector_read: a float4 (vector) load one element past the buffer (heap overflow, read, 16 bytes).
// ./ovf_vector_read runs the buggy variant, ./ovf_vector_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_vec_read(float4* o, const float4* p, int n) { int i = threadIdx.x; if (i < n) o[0].x += p[i].y; }  // BUG:ovf_vector_read

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float4 *p = dmalloc<float4>(100), *o = dmalloc<float4>(1);
    k_vec_read<<<1, 128>>>(o, p, clean ? 100 : 101);
    SYNC();
    return done();
}
