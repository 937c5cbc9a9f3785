// tag_neighbour_read: a per-channel mean whose channel stride was given in bytes reads channel 1 from deep inside the next live buffer (tag mismatch, read).
// ./tag_neighbour_read runs the buggy variant, ./tag_neighbour_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

// One block per channel; the channels of `sig` lie one after another, `chan_stride` elements apart.
__global__ void k_channel_mean(float* mean, const float* sig, int len, long chan_stride) {
    __shared__ float part[256];
    int c = blockIdx.x;
    float s = 0.0f;
    for (int k = threadIdx.x; k < len; k += blockDim.x) s += sig[c * chan_stride + k];  // BUG:tag_neighbour_read
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) mean[c] = part[0] / len;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int len = 8192;                           // 2 channels x 32 KiB = 64 KiB
    float* sig = dmalloc<float>(2 * len);
    float* window = dmalloc<float>(32768);          // 128 KiB, allocated right after: the live neighbour
    float* mean = dmalloc<float>(2);
    // The channel stride in bytes instead of elements: channel 1 starts 128 KiB past `sig`, past its
    // redzone and 56 KiB into `window` (gasan: 72 KiB past `sig`; natively 64 KiB).
    long stride = clean ? len : len * (long)sizeof(float);
    k_channel_mean<<<2, 256>>>(mean, sig, len, stride);
    SYNC();
    CK(cudaFree(window));
    return done();
}
