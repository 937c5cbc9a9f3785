// histogram_bad_bin: a histogram whose bin count is larger than the histogram buffer (atomic overflow).
// ./histogram_bad_bin runs the buggy variant, ./histogram_bad_bin clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_histo(unsigned* h, const int* x, int n, int bins) { int i = threadIdx.x; if (i < n) atomicAdd(&h[x[i] % bins], 1u); }  // BUG:histogram_bad_bin

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<int> x(64);
    for (int i = 0; i < 64; i++) x[i] = i * 5;
    int* dx = dmalloc<int>(64);
    unsigned* h = dmalloc<unsigned>(256);
    CK(cudaMemcpy(dx, x.data(), 256, cudaMemcpyHostToDevice));
    k_histo<<<1, 64>>>(h, dx, 64, clean ? 256 : 320);
    SYNC();
    return done();
}
