// Many host threads registering host memory at once, with kernels reading it (outside checks,
// runtime/src/outside.rs): THREADS threads (default 16) each run ROUNDS rounds (default 100) of
// malloc, cudaHostRegister, a kernel on the thread's own stream that sums the registered buffer at
// its host address, a check of the sum, cudaHostUnregister and free. Sizes vary from 4 bytes to
// 1 MiB, so the outside table is switched while other threads' kernels read it and malloc hands
// freed (unregistered) memory to the next registration. `overflow`: thread 0's kernel in round
// ROUNDS/2 reads one element past its buffer. Prints "result ok" and exits 0 when every sum came
// back right; otherwise prints what failed and exits 4.
//   usage: mt_register clean|overflow [THREADS [ROUNDS]]
// Built by runtime/gpu/build.sh with the pinned nvcc; run with gasan-run --outside-checks 1.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

__global__ void sum_registered(const uint32_t* v, int n, unsigned long long* out) {
    unsigned long long s = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += v[i];
    atomicAdd(out, s);
}

static std::atomic<long> g_failures{0};

static void worker(int t, int rounds, bool overflow) {
    cudaStream_t stream;
    unsigned long long* d_sum;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&d_sum, sizeof *d_sum) != cudaSuccess) {
        g_failures++;
        return;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull * (t + 1);
    for (int r = 0; r < rounds; r++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int n = 1 + (int)((seed >> 33) % (1 << 18));
        uint32_t* h = (uint32_t*)malloc(n * sizeof(uint32_t));
        unsigned long long want = 0;
        for (int i = 0; i < n; i++) { h[i] = (uint32_t)(i ^ t); want += h[i]; }
        cudaError_t e = cudaHostRegister(h, n * sizeof(uint32_t), cudaHostRegisterDefault);
        if (e == cudaSuccess) e = cudaMemsetAsync(d_sum, 0, sizeof *d_sum, stream);
        int reach = (overflow && t == 0 && r == rounds / 2) ? n + 1 : n;
        sum_registered<<<(reach + 255) / 256 < 64 ? (reach + 255) / 256 : 64, 256, 0, stream>>>(h, reach, d_sum);
        unsigned long long got = 0;
        if (e == cudaSuccess) e = cudaMemcpyAsync(&got, d_sum, sizeof got, cudaMemcpyDeviceToHost, stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
        if (e == cudaSuccess) e = cudaHostUnregister(h);
        free(h);
        if (e != cudaSuccess || (reach == n && got != want)) {
            if (g_failures.fetch_add(1) < 10) fprintf(stderr, "thread %d round %d: %s, sum %llu want %llu\n", t, r, cudaGetErrorString(e), got, want);
            return;
        }
    }
    cudaFree(d_sum);
    cudaStreamDestroy(stream);
}

int main(int argc, char** argv) {
    if (argc < 2 || (strcmp(argv[1], "clean") && strcmp(argv[1], "overflow"))) { fprintf(stderr, "usage: %s clean|overflow [THREADS [ROUNDS]]\n", argv[0]); return 2; }
    bool overflow = !strcmp(argv[1], "overflow");
    int threads = argc > 2 ? atoi(argv[2]) : 16, rounds = argc > 3 ? atoi(argv[3]) : 100;
    cudaFree(0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) pool.emplace_back(worker, t, rounds, overflow);
    for (auto& th : pool) th.join();
    if (g_failures) { printf("%ld failures\n", (long)g_failures); return 4; }
    printf("result ok\n");
    return 0;
}
