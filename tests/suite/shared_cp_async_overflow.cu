// shared_cp_async_overflow: an asynchronous global->shared copy (cp.async, sm_80+) stages a tile
// one float4 past the end of its __shared__ array: the copy's shared destination overflows.
// ./shared_cp_async_overflow runs the buggy variant, ./shared_cp_async_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"
#include <cuda_pipeline.h>

// Each of 64 threads stages one float4 of its block's tile at tile[threadIdx.x + skew].
__global__ void k_stage_tile(const float4* in, float* out, int skew) {
    __shared__ float4 tile[64];
    int t = threadIdx.x;
    __pipeline_memcpy_async(&tile[t + skew], &in[blockIdx.x * 64 + t], sizeof(float4));  // BUG:shared_cp_async_overflow
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    out[blockIdx.x * 64 + t] = tile[63 - t].x + tile[t].w;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int blocks = 4;
    float4* in = dmalloc<float4>(blocks * 64);
    float* out = dmalloc<float>(blocks * 64);
    // The clean twin stages every element in place; the bug shifts the tile by one element, so
    // the last thread writes tile[64].
    k_stage_tile<<<blocks, 64>>>(in, out, clean ? 0 : 1);
    SYNC();
    return done();
}
