// mgpu_peer_read: a kernel on device 1 reads one past the end of a buffer of device 0 through peer
// access (issue 40: the owner's shadow is granted to the peer). Needs 2 GPUs with peer access:
// otherwise it prints SKIPPED and exits 77.
// ./mgpu_peer_read runs the buggy variant, ./mgpu_peer_read clean the clean twin.
#include "common.h"

__global__ void k_peer_read(const float* src, long idx, float* out) { if (threadIdx.x == 0) out[0] = src[idx]; }  // BUG:mgpu_peer_read

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int nd = 0, can = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) { printf("SKIPPED: needs 2 GPUs, this machine has %d\n", nd); return 77; }
    CK(cudaDeviceCanAccessPeer(&can, 1, 0));
    if (!can) { printf("SKIPPED: device 1 cannot access device 0's memory (no peer access)\n"); return 77; }
    CK(cudaSetDevice(0));
    float* src = dmalloc<float>(N);
    std::vector<float> h(N);
    for (int i = 0; i < N; i++) h[i] = (float)i;
    CK(cudaMemcpy(src, h.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
    float* out = dmalloc<float>(1);
    k_peer_read<<<1, 32>>>(src, clean ? N - 1 : N, out);
    SYNC();
    float got = 0;
    CK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    printf("read %g\n", got);
    CK(cudaFree(out));
    CK(cudaSetDevice(0));
    CK(cudaFree(src));
    return done();
}
