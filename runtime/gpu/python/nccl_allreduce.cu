// NCCL on one GPU (issue 40 item 4): a one-rank communicator (ncclCommInitAll with one device)
// all-reduces a float buffer of N elements into a receive buffer of N elements; the bug twin asks
// for N + 1, one element past the receive buffer (its send buffer holds N + 1, so only the
// receive side overruns). gasan checks the call's buffers on the host before NCCL runs
// (runtime/src/hooks/nccl.rs): it reports a heap-buffer-overflow, a WRITE by host call
// "ncclAllReduce (recvbuff)", 0 bytes after the 4000-byte receive buffer. NCCL's own kernels are
// SASS and unchecked: without gasan the extra element lands in the allocation's padding unseen.
//
// NCCL is opened with dlopen (RTLD_LOCAL) and its functions looked up on the handle, with the
// prototypes of nccl.h (NCCL 2.30) declared here: no NCCL header or link needed at build time.
//
//     nccl_allreduce [clean] LIBNCCL     (LIBNCCL: the path of libnccl.so.2; nccl_cases.py finds
//                                         PyTorch's, from the nvidia-nccl wheel)
// Prints "result ok" when the reduced buffer is right; exits 77 with "SKIPPED: ..." without a GPU
// or NCCL.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ncclComm* ncclComm_t;
typedef int (*comm_init_all_t)(ncclComm_t*, int, const int*);
typedef int (*all_reduce_t)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
typedef int (*comm_destroy_t)(ncclComm_t);
typedef const char* (*get_error_string_t)(int);

enum { ncclSuccess = 0, ncclFloat32 = 7, ncclSum = 0 };

#define CUDA(x)                                                                  \
    do {                                                                         \
        cudaError_t e_ = (x);                                                    \
        if (e_ != cudaSuccess) {                                                 \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                      \
            return 1;                                                            \
        }                                                                        \
    } while (0)

int main(int argc, char** argv) {
    bool clean = argc > 1 && !strcmp(argv[1], "clean");
    const char* libpath = argc > 1 + clean ? argv[1 + clean] : "libnccl.so.2";
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIPPED: no GPU\n");
        return 77;
    }
    void* lib = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("SKIPPED: cannot open %s: %s\n", libpath, dlerror());
        return 77;
    }
    comm_init_all_t comm_init_all = (comm_init_all_t)dlsym(lib, "ncclCommInitAll");
    all_reduce_t all_reduce = (all_reduce_t)dlsym(lib, "ncclAllReduce");
    comm_destroy_t comm_destroy = (comm_destroy_t)dlsym(lib, "ncclCommDestroy");
    get_error_string_t error_string = (get_error_string_t)dlsym(lib, "ncclGetErrorString");
    if (!comm_init_all || !all_reduce || !comm_destroy || !error_string) {
        printf("SKIPPED: %s lacks NCCL's functions\n", libpath);
        return 77;
    }
    ncclComm_t comm;
    int r = comm_init_all(&comm, 1, NULL);
    if (r != ncclSuccess) {
        printf("ncclCommInitAll: %s\n", error_string(r));
        return 1;
    }
    const size_t n = 1000;
    float *send, *recv;
    CUDA(cudaMalloc(&send, (n + 1) * sizeof(float)));
    CUDA(cudaMalloc(&recv, n * sizeof(float)));
    float host[n + 1];
    for (size_t i = 0; i <= n; i++) host[i] = (float)i;
    CUDA(cudaMemcpy(send, host, sizeof host, cudaMemcpyHostToDevice));
    size_t count = clean ? n : n + 1;  // BUG:nccl_allreduce_overflow (recv holds n elements)
    r = all_reduce(send, recv, count, ncclFloat32, ncclSum, comm, 0);
    if (r != ncclSuccess) {
        printf("ncclAllReduce: %s\n", error_string(r));
        return 1;
    }
    CUDA(cudaDeviceSynchronize());
    CUDA(cudaMemcpy(host, recv, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        if (host[i] != (float)i) {
            printf("recv[%zu] = %g, want %g\n", i, host[i], (double)i);
            return 1;
        }
    }
    comm_destroy(comm);
    CUDA(cudaFree(send));
    CUDA(cudaFree(recv));
    printf("result ok\n");
    return 0;
}
