// scatter_bad_index: a scatter through an index array with one index past the output.
// ./scatter_bad_index runs the buggy variant, ./scatter_bad_index clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_scatter(float* o, const float* in, const int* idx, int n) { int i = threadIdx.x; if (i < n) o[idx[i]] = in[i]; }  // BUG:scatter_bad_index

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<int> idx(64);
    for (int i = 0; i < 64; i++) idx[i] = 63 - i;
    if (!clean) idx[0] = 70;
    float *in = dmalloc<float>(64), *o = dmalloc<float>(64);
    int* di = dmalloc<int>(64);
    CK(cudaMemcpy(di, idx.data(), 256, cudaMemcpyHostToDevice));
    k_scatter<<<1, 64>>>(o, in, di, 64);
    SYNC();
    return done();
}
