// gasan reliability cases (issue 12): whole-grid errors, stream-ordered pools, process churn.
// One program, the case is argv[1]; clean cases print "result ok" and exit 0. Built by
// runtime/gpu/build.sh; run by scripts/gpu-stress.sh.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %d (%s) at %s:%d\n", (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); exit(3); } } while (0)

// Every thread reads p[i % n] (every thread fails when p was freed).
__global__ void readAll(const float* p, int n, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = p[i % n];
    if (v == 12345.0f) out[0] = v;  // keeps the load
}
// Every thread writes p[i % n].
__global__ void writeAll(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    p[i % n] = (float)i;
}
__global__ void fill(float* p, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}
__global__ void addInto(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Grid of `blocks` x 256 threads on a freed 64 KiB buffer (read or write), after `rounds`
// alloc/free rounds; `async`: the buffer was freed with cudaFreeAsync on a stream.
static int grid_uaf(int blocks, bool write, bool async, int rounds) {
    const int n = 16384;  // 64 KiB of floats
    float* out; CK(cudaMalloc(&out, 4));
    for (int r = 0; r < rounds; r++) {
        float* t; CK(cudaMalloc(&t, 4096 + r % 7 * 512)); CK(cudaFree(t));
    }
    float* p;
    cudaStream_t s; CK(cudaStreamCreate(&s));
    if (async) {
        CK(cudaMallocAsync(&p, n * 4, s));
        fill<<<(n + 255) / 256, 256, 0, s>>>(p, n, 1.0f);
        CK(cudaFreeAsync(p, s));
    } else {
        CK(cudaMalloc(&p, n * 4));
        CK(cudaFree(p));
    }
    double t0 = now_ms();
    if (write) writeAll<<<blocks, 256, 0, s>>>(p, n);  // BUG: use after free by every thread
    else readAll<<<blocks, 256, 0, s>>>(p, n, out);    // BUG: use after free by every thread
    cudaError_t e = cudaStreamSynchronize(s);
    fprintf(stderr, "kernel returned %d after %.1f ms\n", (int)e, now_ms() - t0);
    printf("result ok\n");
    return 0;
}

// 200 rounds of stream-ordered allocation on two streams with pool reuse, memsets and
// event-ordered cross-stream hand-offs (allocated on one stream, used and freed on the other).
// `bug`: one buffer is used after its stream-ordered free (every other round is clean).
static int pool_churn(bool bug, bool from_pool) {
    const int n = 1 << 16;
    cudaStream_t s[2];
    CK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
    int dev; CK(cudaGetDevice(&dev));
    cudaMemPool_t pool;
    if (from_pool) {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        CK(cudaMemPoolCreate(&pool, &props));
    } else {
        CK(cudaDeviceGetDefaultMemPool(&pool, dev));
    }
    uint64_t thr = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    float* acc; CK(cudaMalloc(&acc, n * 4));
    CK(cudaMemset(acc, 0, n * 4));
    cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    double t0 = now_ms();
    const int rounds = 200;
    for (int r = 0; r < rounds; r++) {
        cudaStream_t a = s[r & 1], b = s[(r + 1) & 1];
        float *x, *y;
        size_t bytes = (size_t)n * 4 + (r % 5) * 4096;
        if (from_pool) {
            CK(cudaMallocFromPoolAsync(&x, bytes, pool, a));
            CK(cudaMallocFromPoolAsync(&y, bytes, pool, a));
        } else {
            CK(cudaMallocAsync(&x, bytes, a));
            CK(cudaMallocAsync(&y, bytes, a));
        }
        CK(cudaMemsetAsync(y, 0, n * 4, a));
        fill<<<n / 256, 256, 0, a>>>(x, n, 1.0f);
        CK(cudaEventRecord(ev, a));
        CK(cudaStreamWaitEvent(b, ev, 0));  // hand-off: b uses what a allocated
        addInto<<<n / 256, 256, 0, b>>>(y, x, n);
        CK(cudaFreeAsync(x, b));
        if (bug && r == rounds / 2) addInto<<<n / 256, 256, 0, b>>>(y, x, n);  // BUG: x freed above, same stream
        addInto<<<n / 256, 256, 0, b>>>(acc, y, n);
        CK(cudaFreeAsync(y, b));
        if (r % 50 == 49) CK(cudaMemPoolTrimTo(pool, 0));
    }
    CK(cudaDeviceSynchronize());
    double ms = now_ms() - t0;
    size_t used = 0;
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    std::vector<float> h(n);
    CK(cudaMemcpy(h.data(), acc, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != (float)rounds) { printf("wrong result at %d: %f\n", i, h[i]); return 4; }
    printf("BENCH pool_churn rounds=%d ms=%.2f pool_used=%zu\n", rounds, ms, used);
    printf("result ok\n");
    return 0;
}

// A short clean program with a few allocations, copies and kernels (for many processes at once).
static int small_clean() {
    const int n = 1 << 18;
    std::vector<float> h(n, 2.0f);
    float *a, *b; CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, 4000));
    CK(cudaMemcpy(a, h.data(), n * 4, cudaMemcpyHostToDevice));
    for (int k = 0; k < 20; k++) {
        float* t; CK(cudaMalloc(&t, n * 4));
        fill<<<n / 256, 256>>>(t, n, 1.0f);
        addInto<<<n / 256, 256>>>(a, t, n);
        CK(cudaFree(t));
    }
    fill<<<4, 250>>>(b, 1000, 3.0f);
    CK(cudaMemcpy(h.data(), a, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (h[i] != 22.0f) { printf("wrong result at %d\n", i); return 4; }
    CK(cudaFree(a)); CK(cudaFree(b));
    printf("result ok\n");
    return 0;
}

// Large buffers allocated, used and freed many times: more bytes over the program's life than the
// gasan pool's VA (run with a small pool_size to make it quick). Clean; must not run out of memory.
static int va_churn(int rounds) {
    const size_t n = 64u << 20;  // 256 MiB of floats
    float* keep; CK(cudaMalloc(&keep, n * 4));
    fill<<<(unsigned)(n / 256), 256>>>(keep, (int)n, 1.0f);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; r++) {
        float* t; CK(cudaMalloc(&t, n * 4));
        fill<<<(unsigned)(n / 256), 256>>>(t, (int)n, 1.0f);
        addInto<<<(unsigned)(n / 256), 256>>>(keep, t, (int)n);
        CK(cudaFree(t));
    }
    float h = 0; CK(cudaMemcpy(&h, keep + n - 1, 4, cudaMemcpyDeviceToHost));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (h != 1.0f + rounds) { printf("wrong result %f\n", h); return 4; }
    printf("BENCH va_churn rounds=%d GiB=%d ms=%.1f\n", rounds, rounds / 4, ms);
    printf("result ok\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s CASE [BLOCKS]\n", argv[0]); return 2; }
    const char* c = argv[1];
    int blocks = argc > 2 ? atoi(argv[2]) : 64;
    if (!strcmp(c, "grid_uaf_read")) return grid_uaf(blocks, false, false, 0);
    if (!strcmp(c, "grid_uaf_write")) return grid_uaf(blocks, true, false, 0);
    if (!strcmp(c, "grid_uaf_async")) return grid_uaf(blocks, false, true, 0);
    if (!strcmp(c, "grid_uaf_rounds")) return grid_uaf(blocks, true, false, 2000);
    if (!strcmp(c, "pool_churn")) return pool_churn(false, false);
    if (!strcmp(c, "pool_churn_frompool")) return pool_churn(false, true);
    if (!strcmp(c, "pool_churn_uaf")) return pool_churn(true, false);
    if (!strcmp(c, "small_clean")) return small_clean();
    if (!strcmp(c, "va_churn")) return va_churn(argc > 2 ? atoi(argv[2]) : 256);
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
}
