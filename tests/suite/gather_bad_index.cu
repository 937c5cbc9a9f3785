// gather_bad_index: a gather through an index array with one index one past the input.
// ./gather_bad_index runs the buggy variant, ./gather_bad_index clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_gather(float* o, const float* in, const int* idx, int n) { int i = threadIdx.x; if (i < n) o[i] = in[idx[i]]; }  // BUG:gather_bad_index

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<int> idx(64);
    for (int i = 0; i < 64; i++) idx[i] = i;
    if (!clean) idx[63] = 64;
    float *in = dmalloc<float>(64), *o = dmalloc<float>(64);
    int* di = dmalloc<int>(64);
    CK(cudaMemcpy(di, idx.data(), 256, cudaMemcpyHostToDevice));
    k_gather<<<1, 64>>>(o, in, di, 64);
    SYNC();
    return done();
}
