// heap_overflow_read: each thread builds a running sum in an in-kernel malloc'd scratch buffer and
// reads one element past its end when summing it up.
// ./heap_overflow_read runs the buggy variant, ./heap_overflow_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_scratch_sum(int n, int last, long long* out) {
    long long* scratch = (long long*)malloc(n * sizeof(long long));
    if (!scratch) { out[threadIdx.x] = -1; return; }
    for (int i = 0; i < n; ++i) scratch[i] = (i == 0 ? 0 : scratch[i - 1]) + threadIdx.x + i;
    long long total = 0;
    for (int i = 0; i <= last; i += 4) total += scratch[i];  // BUG:heap_overflow_read
    out[threadIdx.x] = total;
    free(scratch);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    long long* out = dmalloc<long long>(32);
    // n = 40: the last index read is 36 (clean) or 40, one element past the block.
    k_scratch_sum<<<1, 32>>>(40, clean ? 39 : 40, out);
    SYNC();
    return done();
}
