// shared_next_array: a block keeps two __shared__ arrays side by side (keys, then counts); a write
// with an off-by-one bound spills from the first into the second, which compute-sanitizer-style
// window checks cannot see (the address is still inside the CTA's shared memory).
// ./shared_next_array runs the buggy variant, ./shared_next_array clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_two_arrays(const int* in, int* out, int limit) {
    __shared__ int keys[64];
    __shared__ int counts[64];
    int t = threadIdx.x;
    counts[t] = 0;
    keys[t] = in[t];
    __syncthreads();
    if (t <= limit - 64) keys[t + 63] = -1;  // BUG:shared_next_array
    __syncthreads();
    out[t] = keys[t] + counts[t];
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* in = dmalloc<int>(64);
    int* out = dmalloc<int>(64);
    // Buggy: limit 65 lets threads 0 and 1 write keys[63] and keys[64] (counts[0]); clean: 64.
    k_two_arrays<<<1, 64>>>(in, out, clean ? 64 : 65);
    SYNC();
    return done();
}
