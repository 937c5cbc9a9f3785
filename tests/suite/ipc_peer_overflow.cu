// ipc_peer_overflow: the producer's buffer is on device 0, the consumer imports it on device 1 and
// reads one past its end (issue 40: an IPC buffer overrun across devices). Needs 2 GPUs: otherwise
// it prints SKIPPED and exits 77.
// ./ipc_peer_overflow runs the buggy variant, ./ipc_peer_overflow clean the clean twin.
#include "ipc.h"

__global__ void k_ipc_peer_read(const float* src, long idx, float* out) { if (threadIdx.x == 0) out[0] = src[idx]; }  // BUG:ipc_peer_overflow

static void launch(const float* src, long idx, float* out) { k_ipc_peer_read<<<1, 32>>>(src, idx, out); }

int main(int argc, char** argv) { return ipc_main(argc, argv, 2, launch); }
