// shared_read_past: each thread reads its right neighbour's element of a static __shared__ tile; the
// last thread reads one element past the tile (the buggy variant's block is one thread larger than
// the tile it was written for).
// ./shared_read_past runs the buggy variant, ./shared_read_past clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

#define TILE 128
__global__ void k_shared_neighbour(const float* in, float* out, int n) {
    __shared__ float tile[TILE];
    int t = threadIdx.x;
    if (t < TILE) tile[t] = in[t];
    __syncthreads();
    int next = t + 1 < n ? t + 1 : t;
    out[t] = tile[next] - tile[t < TILE ? t : 0];  // BUG:shared_read_past
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(TILE + 1);
    float* out = dmalloc<float>(TILE + 1);
    // Buggy: 129 threads and n = 129, so thread 127 reads tile[128]; clean: 128 threads.
    int threads = clean ? TILE : TILE + 1;
    k_shared_neighbour<<<2, threads>>>(in, out, threads);
    SYNC();
    return done();
}
