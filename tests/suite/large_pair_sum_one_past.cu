// large_pair_sum_one_past: out[i] = in[i] + in[i + 1] for every i of a 1 MiB + 12 B buffer, so the
// last thread reads 4 bytes past its end (heap overflow, read, into the block's last granule).
// A straight-line kernel over large blocks: the in-bounds reads pass on the looked-up bounds, the
// one past must not.
// ./large_pair_sum_one_past runs the buggy variant, ./large_pair_sum_one_past clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_pair_sum(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + in[i + 1];  // BUG:large_pair_sum_one_past
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = (1 << 18) + 3;
    float *in = dmalloc<float>(n), *out = dmalloc<float>(n);
    k_pair_sum<<<(n + 255) / 256, 256>>>(out, in, clean ? n - 1 : n);
    SYNC();
    return done();
}
