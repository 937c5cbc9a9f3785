// mgpu_pinned_overflow: pinned host memory allocated while device 0 is current (device 0's pool holds
// it) is read one past its end by a kernel on device 1 (issue 40: host memory is every GPU's, and a
// kernel checks it against its owner's shadow). No peer access is needed. Needs 2 GPUs: otherwise
// it prints SKIPPED and exits 77.
// ./mgpu_pinned_overflow runs the buggy variant, ./mgpu_pinned_overflow clean the clean twin.
#include "common.h"

__global__ void k_pinned_read(const float* src, long idx, float* out) { if (threadIdx.x == 0) out[0] = src[idx]; }  // BUG:mgpu_pinned_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) { printf("SKIPPED: needs 2 GPUs, this machine has %d\n", nd); return 77; }
    CK(cudaSetDevice(0));
    float* src = nullptr;
    CK(cudaMallocHost(&src, N * sizeof(float)));
    for (int i = 0; i < N; i++) src[i] = (float)i;
    CK(cudaSetDevice(1));
    float* out = dmalloc<float>(1);
    k_pinned_read<<<1, 32>>>(src, clean ? N - 1 : N, out);
    SYNC();
    float got = 0;
    CK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    printf("read %g\n", got);
    CK(cudaFree(out));
    CK(cudaFreeHost(src));
    return done();
}
