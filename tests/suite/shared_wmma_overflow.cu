// shared_wmma_overflow: a warp multiplies 16x16 half tiles on the tensor cores, staging them in
// __shared__ arrays, and loads its A fragment one row too far down its tile: wmma's
// load_matrix_sync reads 16 rows from row 1, the last one past the array.
// ./shared_wmma_overflow runs the buggy variant, ./shared_wmma_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

__global__ void k_wmma_tile(const half* a, const half* b, float* c, int row_skew) {
    __shared__ __align__(32) half sa[16 * 16];
    __shared__ __align__(32) half sb[16 * 16];
    __shared__ __align__(32) float sc[16 * 16];
    for (int i = threadIdx.x; i < 16 * 16; i += 32) { sa[i] = a[i]; sb[i] = b[i]; }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, sa + row_skew * 16, 16);  // BUG:shared_wmma_overflow
    wmma::load_matrix_sync(fb, sb, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(sc, fc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = threadIdx.x; i < 16 * 16; i += 32) c[i] = sc[i];
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    half* a = dmalloc<half>(16 * 16);
    half* b = dmalloc<half>(16 * 16);
    float* c = dmalloc<float>(16 * 16);
    k_wmma_tile<<<1, 32>>>(a, b, c, clean ? 0 : 1);
    SYNC();
    return done();
}
