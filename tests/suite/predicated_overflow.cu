// predicated_overflow: a store guarded by `i <= n` instead of `i < n` (predicated off-by-one).
// ./predicated_overflow runs the buggy variant, ./predicated_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_pred(float* p, const int* flags, int n) { int i = threadIdx.x; if (flags[i % 32] && i <= n) p[i] = 4.0f; }  // BUG:predicated_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(64);
    int* f = dmalloc<int>(32);
    CK(cudaMemset(f, 1, 128));
    k_pred<<<1, 128>>>(p, f, clean ? 63 : 64);
    SYNC();
    return done();
}
