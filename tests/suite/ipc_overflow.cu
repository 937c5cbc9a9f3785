// ipc_overflow: two processes on one GPU; the consumer reads one past the end of the buffer it
// imported with cudaIpcOpenMemHandle (issue 40: IPC between gasan processes, bounds kept).
// ./ipc_overflow runs the buggy variant, ./ipc_overflow clean the clean twin.
#include "ipc.h"

__global__ void k_ipc_read(const float* src, long idx, float* out) { if (threadIdx.x == 0) out[0] = src[idx]; }  // BUG:ipc_overflow

static void launch(const float* src, long idx, float* out) { k_ipc_read<<<1, 32>>>(src, idx, out); }

int main(int argc, char** argv) { return ipc_main(argc, argv, 1, launch); }
