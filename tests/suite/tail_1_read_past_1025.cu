// tail_1_read_past_1025: each thread sums a 1025-byte buffer's bytes from its own start; the last
// thread's loop reads one byte past the end (heap overflow read, 1 byte, an odd-sized buffer).
// ./tail_1_read_past_1025 runs the buggy variant, ./tail_1_read_past_1025 clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_sum_bytes(const unsigned char* p, int n, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 1025) return;
    int s = 0;
    for (int k = i; k <= n; k += 256) s += p[k];  // BUG:tail_1_read_past_1025 (k == n when n == 1025)
    out[i] = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    unsigned char* p = dmalloc<unsigned char>(1025);
    int* out = dmalloc<int>(1025);
    k_sum_bytes<<<5, 256>>>(p, clean ? 1024 : 1025, out);
    SYNC();
    return done();
}
