// mgpu_device1_overflow: a store one past a buffer allocated and used on device 1 (issue 40: every
// GPU of a process checked). Needs 2 GPUs: with fewer it prints SKIPPED and exits 77.
// ./mgpu_device1_overflow runs the buggy variant, ./mgpu_device1_overflow clean the clean twin.
#include "common.h"

__global__ void k_dev1(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 7.0f; }  // BUG:mgpu_device1_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) { printf("SKIPPED: needs 2 GPUs, this machine has %d\n", nd); return 77; }
    CK(cudaSetDevice(0));
    float* p0 = dmalloc<float>(N);  // device 0 has memory too: the bug is not on the first GPU used
    CK(cudaSetDevice(1));
    float* p = dmalloc<float>(N);
    k_dev1<<<1, 32>>>(p, clean ? N - 1 : N);
    SYNC();
    CK(cudaFree(p));
    CK(cudaSetDevice(0));
    CK(cudaFree(p0));
    return done();
}
