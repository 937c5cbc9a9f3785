// Host cost of one allocation and its free, by size and kind of call: what a program that allocates
// per tensor (PyTorch without its caching allocator, as under gasan) pays per tensor.
//   alloc_cost [ITERS]   prints, for each call kind and size:
//     ALLOC kind=<sync|async> size=<bytes> alloc_us=<median> free_us=<median> pair_us=<median>
//   sync:  cudaMalloc, a kernel writing every 4 KiB of the block, cudaFree;
//   async: cudaMallocAsync on a stream, the kernel on that stream, cudaFreeAsync on it (nothing
//          waits; the stream is drained every 64 pairs, outside the timed calls).
// Medians of ITERS (default 200) pairs after 20 untimed ones; host wall time of each call.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void touch(unsigned char *p, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4096;
    if (i < n) p[i] = 1;
}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void launch_touch(unsigned char *p, size_t n, cudaStream_t s) {
    size_t pages = (n + 4095) / 4096;
    touch<<<(unsigned)((pages + 255) / 256), 256, 0, s>>>(p, n);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    const size_t sizes[] = {512, 4096, 65536, 262144, 1 << 20, 4 << 20, 16 << 20};
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaFree(0));
    for (int async = 0; async < 2; async++) {
        for (size_t n : sizes) {
            std::vector<double> a, f, pair;
            for (int i = 0; i < iters + 20; i++) {
                unsigned char *p = nullptr;
                double t0 = now_us();
                if (async) CK(cudaMallocAsync((void **)&p, n, s));
                else CK(cudaMalloc((void **)&p, n));
                double t1 = now_us();
                launch_touch(p, n, async ? s : 0);
                double t2 = now_us();
                if (async) CK(cudaFreeAsync(p, s));
                else CK(cudaFree(p));
                double t3 = now_us();
                if (i >= 20) {
                    a.push_back(t1 - t0);
                    f.push_back(t3 - t2);
                    pair.push_back((t1 - t0) + (t3 - t2));
                }
                if (async && i % 64 == 63) CK(cudaStreamSynchronize(s));
            }
            CK(cudaStreamSynchronize(s));
            CK(cudaDeviceSynchronize());
            CK(cudaGetLastError());
            printf("ALLOC kind=%s size=%zu alloc_us=%.1f free_us=%.1f pair_us=%.1f\n", async ? "async" : "sync", n, median(a), median(f), median(pair));
            fflush(stdout);
        }
    }
    CK(cudaStreamDestroy(s));
    return 0;
}
