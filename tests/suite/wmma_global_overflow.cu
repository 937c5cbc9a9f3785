// wmma_global_overflow: a tensor-core GEMM in the shape of the CUDA tutorials loads its fragments
// straight from global memory with wmma::load_matrix_sync, and matrix A was allocated one
// 16-column tile short of M x K: the warps working on the last tile read past it.
// ./wmma_global_overflow runs the buggy variant, ./wmma_global_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

// Column-major M x K by K x N, one warp per 16 x 16 tile of C.
__global__ void k_wmma_gemm(const half* a, const half* b, float* c, int M, int N, int K) {
    int warpM = (blockIdx.x * blockDim.x + threadIdx.x) / 32, warpN = blockIdx.y * blockDim.y + threadIdx.y;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::col_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    int aRow = warpM * 16, bCol = warpN * 16;
    if (aRow >= M || bCol >= N) return;
    for (int i = 0; i < K; i += 16) {
        wmma::load_matrix_sync(fa, a + aRow + i * M, M);  // BUG:wmma_global_overflow
        wmma::load_matrix_sync(fb, b + i + bCol * K, K);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + aRow + bCol * M, acc, M, wmma::mem_col_major);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int M = 64, N = 64, K = 64;
    // The bug: A holds M x (K - 16) halves, so the last k-step's tiles lie past its end.
    half* a = dmalloc<half>(clean ? M * K : M * (K - 16));
    half* b = dmalloc<half>(K * N);
    float* c = dmalloc<float>(M * N);
    dim3 block(128, 4), grid((M + 16 * 4 - 1) / (16 * 4), (N + 16 * 4 - 1) / (16 * 4));
    k_wmma_gemm<<<grid, block>>>(a, b, c, M, N, K);
    SYNC();
    return done();
}
