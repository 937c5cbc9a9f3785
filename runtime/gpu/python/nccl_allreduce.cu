// NCCL in one process (issue 40 item 4): a communicator over one GPU, or every GPU (`all`), made by
// ncclCommInitAll, all-reduces float buffers of N elements; the bug twin asks for N + 1, which the
// last GPU's receive buffer (N elements) cannot hold (every send buffer and the other receive
// buffers hold N + 1, so only that one overruns). gasan checks the call's buffers on the host before
// NCCL runs (runtime/src/hooks/nccl.rs): it reports a heap-buffer-overflow, a WRITE by host call
// "ncclAllReduce (recvbuff)", 0 bytes after the 4000-byte receive buffer (with `all`, of the last
// GPU's pool). NCCL's own kernels are SASS and unchecked: without gasan the extra element lands in
// the allocation's padding unseen.
//
// NCCL is opened with dlopen (RTLD_LOCAL) and its functions looked up on the handle, with the
// prototypes of nccl.h (NCCL 2.30) declared here: no NCCL header or link needed at build time.
//
//     nccl_allreduce [clean] [all] LIBNCCL   (LIBNCCL: the path of libnccl.so.2; nccl_cases.py
//                                            finds PyTorch's, from the nvidia-nccl wheel)
// Prints "result ok" when every reduced buffer is right; exits 77 with "SKIPPED: ..." without a GPU
// (two, with `all`) or NCCL.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ncclComm* ncclComm_t;
typedef int (*comm_init_all_t)(ncclComm_t*, int, const int*);
typedef int (*all_reduce_t)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
typedef int (*group_t)(void);
typedef int (*comm_destroy_t)(ncclComm_t);
typedef const char* (*get_error_string_t)(int);

enum { ncclSuccess = 0, ncclFloat32 = 7, ncclSum = 0 };
enum { MAX_GPUS = 16 };

#define CUDA(x)                                                                  \
    do {                                                                         \
        cudaError_t e_ = (x);                                                    \
        if (e_ != cudaSuccess) {                                                 \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                      \
            return 1;                                                            \
        }                                                                        \
    } while (0)

int main(int argc, char** argv) {
    bool clean = false, all = false;
    const char* libpath = "libnccl.so.2";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "clean")) clean = true;
        else if (!strcmp(argv[i], "all")) all = true;
        else libpath = argv[i];
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIPPED: no GPU\n");
        return 77;
    }
    if (all && ndev < 2) {
        printf("SKIPPED: needs 2 GPUs, this machine has %d\n", ndev);
        return 77;
    }
    int n_gpus = all ? (ndev < MAX_GPUS ? ndev : MAX_GPUS) : 1;
    void* lib = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("SKIPPED: cannot open %s: %s\n", libpath, dlerror());
        return 77;
    }
    comm_init_all_t comm_init_all = (comm_init_all_t)dlsym(lib, "ncclCommInitAll");
    all_reduce_t all_reduce = (all_reduce_t)dlsym(lib, "ncclAllReduce");
    group_t group_start = (group_t)dlsym(lib, "ncclGroupStart");
    group_t group_end = (group_t)dlsym(lib, "ncclGroupEnd");
    comm_destroy_t comm_destroy = (comm_destroy_t)dlsym(lib, "ncclCommDestroy");
    get_error_string_t error_string = (get_error_string_t)dlsym(lib, "ncclGetErrorString");
    if (!comm_init_all || !all_reduce || !group_start || !group_end || !comm_destroy || !error_string) {
        printf("SKIPPED: %s lacks NCCL's functions\n", libpath);
        return 77;
    }
    ncclComm_t comms[MAX_GPUS];
    int r = comm_init_all(comms, n_gpus, NULL);
    if (r != ncclSuccess) {
        printf("ncclCommInitAll: %s\n", error_string(r));
        return 1;
    }
    const size_t n = 1000;
    float *send[MAX_GPUS], *recv[MAX_GPUS];
    float host[n + 1];
    for (size_t i = 0; i <= n; i++) host[i] = (float)i;
    for (int d = 0; d < n_gpus; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaMalloc(&send[d], (n + 1) * sizeof(float)));
        CUDA(cudaMalloc(&recv[d], (d == n_gpus - 1 ? n : n + 1) * sizeof(float)));
        CUDA(cudaMemcpy(send[d], host, sizeof host, cudaMemcpyHostToDevice));
    }
    size_t count = clean ? n : n + 1;  // BUG:nccl_allreduce_overflow (the last recv holds n elements)
    group_start();
    for (int d = 0; d < n_gpus && r == ncclSuccess; d++) {
        CUDA(cudaSetDevice(d));
        r = all_reduce(send[d], recv[d], count, ncclFloat32, ncclSum, comms[d], 0);
    }
    int r_end = group_end();
    if (r != ncclSuccess || r_end != ncclSuccess) {
        printf("ncclAllReduce: %s\n", error_string(r != ncclSuccess ? r : r_end));
        return 1;
    }
    for (int d = 0; d < n_gpus; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaDeviceSynchronize());
        CUDA(cudaMemcpy(host, recv[d], n * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            if (host[i] != (float)(i * n_gpus)) {
                printf("GPU %d: recv[%zu] = %g, want %g\n", d, i, host[i], (double)(i * n_gpus));
                return 1;
            }
        }
    }
    for (int d = 0; d < n_gpus; d++) {
        comm_destroy(comms[d]);
        CUDA(cudaSetDevice(d));
        CUDA(cudaFree(send[d]));
        CUDA(cudaFree(recv[d]));
    }
    printf("result ok (%d GPU%s)\n", n_gpus, n_gpus > 1 ? "s" : "");
    return 0;
}
