// local_callee_read_past: a kernel fills a thread-local array and hands it to a non-inlined helper
// that sums one element too many (`i <= n`): the helper reads past its caller's local array.
// ./local_callee_read_past runs the buggy variant, ./local_callee_read_past clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__device__ __noinline__ int sum_first(const int* a, int n, int inclusive) {
    int s = 0;
    for (int i = 0; i < n + inclusive; i++) s += a[i];  // BUG:local_callee_read_past
    return s;
}

__global__ void k_callee_read(const int* in, int* out, int inclusive) {
    int vals[8];
    for (int i = 0; i < 8; i++) vals[i] = in[(threadIdx.x + i) & 63] * (i + 1);
    out[threadIdx.x] = sum_first(vals, 8, inclusive);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* in = dmalloc<int>(64);
    int* out = dmalloc<int>(64);
    k_callee_read<<<2, 64>>>(in, out, clean ? 0 : 1);
    SYNC();
    return done();
}
