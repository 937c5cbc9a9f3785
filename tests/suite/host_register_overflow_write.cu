// host_register_overflow_write: a kernel scatters results into registered host memory (page-locked
// in place with cudaHostRegister, written at its host address) through an index table with one
// entry past the range: the write lands in the host heap right after it, silently, natively.
// ./host_register_overflow_write runs the buggy variant, ./host_register_overflow_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_scatter(const int* index, const float* val, int n, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[index[i]] = val[i];  // BUG:host_register_overflow_write
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 1500;
    std::vector<int> index(n);
    std::vector<float> val(n);
    for (int i = 0; i < n; i++) { index[i] = n - 1 - i; val[i] = (float)i; }
    if (!clean) index[n / 2] = n;  // one past the registered results
    float* results = new float[n + 16];
    CK(cudaHostRegister(results, n * sizeof(float), cudaHostRegisterMapped));
    int* d_index = dmalloc<int>(n);
    float* d_val = dmalloc<float>(n);
    CK(cudaMemcpy(d_index, index.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_val, val.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    k_scatter<<<(n + 127) / 128, 128>>>(d_index, d_val, n, results);
    SYNC();
    if (clean && results[0] != (float)(n - 1)) { printf("wrong result %g\n", results[0]); return 4; }
    CK(cudaHostUnregister(results));
    delete[] results;
    return done();
}
