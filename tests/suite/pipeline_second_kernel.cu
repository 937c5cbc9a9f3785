// pipeline_second_kernel: a two-kernel pipeline whose second stage writes one element past its output.
// ./pipeline_second_kernel runs the buggy variant, ./pipeline_second_kernel clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_stage1(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] = i; }
__global__ void k_stage2(float* b, const float* a, int n, int extra) { int i = threadIdx.x; if (i < n + extra) b[i] = a[i % n] * 2; }  // BUG:pipeline_second_kernel

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float *a = dmalloc<float>(100), *b = dmalloc<float>(100);
    k_stage1<<<1, 128>>>(a, 100);
    k_stage2<<<1, 128>>>(b, a, 100, clean ? 0 : 1);
    SYNC();
    return done();
}
