// local_negative_index: a thread-local lookup table indexed by (key - 1) where key 0 is allowed
// through: the read is at index -1, before the local array.
// ./local_negative_index runs the buggy variant, ./local_negative_index clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_local_lut(const int* keys, float* out, int n) {
    float lut[16];
    for (int i = 0; i < 16; i++) lut[i] = out[i] * 2.0f + i;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[16 + i] = lut[keys[i] - 1];  // BUG:local_negative_index
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<int> h(64);
    for (int i = 0; i < 64; i++) h[i] = 1 + i % 16;
    if (!clean) h[5] = 0;
    int* keys = dmalloc<int>(64);
    CK(cudaMemcpy(keys, h.data(), 64 * sizeof(int), cudaMemcpyHostToDevice));
    float* out = dmalloc<float>(16 + 64);
    k_local_lut<<<1, 64>>>(keys, out, 64);
    SYNC();
    return done();
}
