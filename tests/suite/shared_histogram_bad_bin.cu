// shared_histogram_bad_bin: a per-block shared-memory histogram; a sample equal to the number of
// bins lands one past the shared bin array (atomicAdd on shared memory).
// ./shared_histogram_bad_bin runs the buggy variant, ./shared_histogram_bad_bin clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

#define BINS 64
__global__ void k_shared_histo(const int* samples, int n, unsigned* global_bins) {
    __shared__ unsigned bins[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[samples[i]], 1u);  // BUG:shared_histogram_bad_bin
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) atomicAdd(&global_bins[b], bins[b]);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    std::vector<int> h(N);
    for (int i = 0; i < N; i++) h[i] = (i * 7) % BINS;
    h[N / 2] = clean ? BINS - 1 : BINS;  // buggy: one sample out of range
    int* samples = dmalloc<int>(N);
    CK(cudaMemcpy(samples, h.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    unsigned* bins = dmalloc<unsigned>(BINS);
    k_shared_histo<<<4, 128>>>(samples, N, bins);
    SYNC();
    return done();
}
