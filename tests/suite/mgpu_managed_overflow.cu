// mgpu_managed_overflow: managed memory allocated while device 1 is current (device 1's pool holds it)
// is written one past its end by a kernel on device 0, after a prefetch to device 0 (issue 40: with
// several GPUs a managed block stays in host memory, every GPU's, checked against its owner's
// shadow). Needs 2 GPUs: otherwise it prints SKIPPED and exits 77.
// ./mgpu_managed_overflow runs the buggy variant, ./mgpu_managed_overflow clean the clean twin.
#include "common.h"

__global__ void k_managed_write(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 5.0f; }  // BUG:mgpu_managed_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) { printf("SKIPPED: needs 2 GPUs, this machine has %d\n", nd); return 77; }
    CK(cudaSetDevice(1));
    float* p = nullptr;
    CK(cudaMallocManaged(&p, N * sizeof(float)));
    for (int i = 0; i < N; i++) p[i] = 0.0f;
    CK(cudaSetDevice(0));
    cudaMemLocation to0 = {cudaMemLocationTypeDevice, 0};
    CK(cudaMemPrefetchAsync(p, N * sizeof(float), to0, 0, 0));
    k_managed_write<<<1, 32>>>(p, clean ? N - 1 : N);
    SYNC();
    printf("wrote %g\n", p[clean ? N - 1 : 0]);
    CK(cudaFree(p));
    return done();
}
