// shared_ldmatrix_overflow: a warp loads four 8x8 b16 matrices from a 16x16 half tile in shared
// memory with ldmatrix (as tensor-core GEMMs do), and the row addresses are off by one row: the
// last lanes' rows lie past the tile.
// ./shared_ldmatrix_overflow runs the buggy variant, ./shared_ldmatrix_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"
#include <cuda_fp16.h>

__global__ void k_ldmatrix_tile(float* out, int row_skew) {
    __shared__ __align__(16) half tile[16 * 16];
    int lane = threadIdx.x;
    for (int i = lane; i < 16 * 16; i += 32) tile[i] = __float2half((float)(i % 7));
    __syncwarp();
    // Lane l supplies row (l % 16) + row_skew, column half (l / 16): 16 bytes each.
    unsigned row = (unsigned)__cvta_generic_to_shared(&tile[((lane % 16) + row_skew) * 16 + (lane / 16) * 8]);
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(row));  // BUG:shared_ldmatrix_overflow
    half2 a = *reinterpret_cast<half2*>(&r0), b = *reinterpret_cast<half2*>(&r3);
    out[lane] = __half2float(a.x) + __half2float(b.y) + (float)((r1 ^ r2) & 1);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* out = dmalloc<float>(32);
    k_ldmatrix_tile<<<1, 32>>>(out, clean ? 0 : 1);
    SYNC();
    return done();
}
