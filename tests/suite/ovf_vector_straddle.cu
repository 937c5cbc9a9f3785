// ovf_vector_straddle: a float4 (16-byte) store whose first 8 bytes lie inside the buffer and last 8
// past its end (a buffer sized in floats, written in float4s: the tail of a vectorised loop).
// ./ovf_vector_straddle runs the buggy variant, ./ovf_vector_straddle clean the clean twin
// (the tail written one float at a time). Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_vec_tail(float* p, int n, bool vector_tail) {
    int i = threadIdx.x * 4;
    if (i + 4 <= n || vector_tail) {
        if (i < n) *reinterpret_cast<float4*>(p + i) = make_float4(1, 2, 3, 4);  // BUG:ovf_vector_straddle
    } else {
        for (int j = i; j < n; j++) p[j] = 1;
    }
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 398;  // 99 whole float4s and 2 floats: the last float4 runs 8 bytes past the end
    float* p = dmalloc<float>(n);
    k_vec_tail<<<1, 128>>>(p, n, !clean);
    SYNC();
    return done();
}
