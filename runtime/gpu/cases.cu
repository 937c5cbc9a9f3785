// gasan GPU verification cases: one program, the case is argv[1]. Every case checks CUDA errors;
// clean cases print "result ok". Built by runtime/gpu/build.sh with the pinned nvcc.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <signal.h>
#include <sys/mman.h>
#include <thread>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %d (%s) at %s:%d\n", (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); exit(3); } } while (0)

__global__ void vecAdd(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
// Writes one element past the end (i == n).
__global__ void vecAddOffByOne(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) c[i] = (i < n ? a[i] + b[i] : 1.0f);  // BUG: i == n writes c[n]
}
__global__ void readAt(const float* p, long idx, float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = p[idx];  // BUG when idx is out of bounds
}
__global__ void writeAt(float* p, long idx) {
    if (threadIdx.x == 0 && blockIdx.x == 0) p[idx] = 42.0f;  // BUG when idx is out of bounds
}
__global__ void scale(float* p, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= s;
}
__global__ void histo(unsigned* h, const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&h[x[i] & 255], 1u);
}
__global__ void empty() {}

static float* dalloc(size_t n) { float* p; CK(cudaMalloc(&p, n * sizeof(float))); return p; }

static int vecadd_clean(int n) {
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }
    float *da = dalloc(n), *db = dalloc(n), *dc = dalloc(n);
    CK(cudaMemcpy(da, a.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), n * 4, cudaMemcpyHostToDevice));
    vecAdd<<<(n + 255) / 256, 256>>>(dc, da, db, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(c.data(), dc, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (c[i] != 3.0f * i) { printf("wrong result at %d\n", i); return 4; }
    CK(cudaFree(da)); CK(cudaFree(db)); CK(cudaFree(dc));
    printf("result ok\n");
    return 0;
}

static int multi_clean() {
    const int n = 1 << 20;
    float* x = dalloc(n);
    int* keys; CK(cudaMalloc(&keys, n * sizeof(int)));
    unsigned* h; CK(cudaMalloc(&h, 256 * sizeof(unsigned)));
    CK(cudaMemset(h, 0, 256 * sizeof(unsigned)));
    std::vector<int> hk(n); for (int i = 0; i < n; i++) hk[i] = i * 7;
    CK(cudaMemcpy(keys, hk.data(), n * 4, cudaMemcpyHostToDevice));
    std::vector<float> hx(n, 1.0f);
    CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
    for (int r = 0; r < 10; r++) scale<<<n / 256, 256>>>(x, 2.0f, n);
    histo<<<n / 256, 256>>>(h, keys, n);
    // Small allocations come and go between kernels.
    for (int i = 0; i < 100; i++) { float* t = dalloc(1 + i * 13); scale<<<1, 32>>>(t, 1.0f, 1); CK(cudaFree(t)); }
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> hh(256);
    CK(cudaMemcpy(hh.data(), h, 256 * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hx.data(), x, n * 4, cudaMemcpyDeviceToHost));
    unsigned total = 0; for (unsigned v : hh) total += v;
    if (total != (unsigned)n || hx[12345] != 1024.0f) { printf("wrong result\n"); return 4; }
    CK(cudaFree(x)); CK(cudaFree(keys)); CK(cudaFree(h));
    printf("result ok\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s CASE\n", argv[0]); return 2; }
    const char* c = argv[1];
    const int n = 1000;
    if (!strcmp(c, "vecadd_clean")) return vecadd_clean(n);
    if (!strcmp(c, "multi_clean")) return multi_clean();
    if (!strcmp(c, "overflow_write")) {  // adjacent write, 4 bytes past 1000 floats
        float *a = dalloc(n), *b = dalloc(n), *dc = dalloc(n);
        CK(cudaMemset(a, 0, n * 4)); CK(cudaMemset(b, 0, n * 4));
        vecAddOffByOne<<<(n + 256) / 256, 256>>>(dc, a, b, n);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "overflow_read")) {  // adjacent read
        float *a = dalloc(n), *out = dalloc(1);
        readAt<<<1, 32>>>(a, n, out);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "underflow_read")) {  // 1 element before the start
        float *a = dalloc(n), *b = dalloc(n), *out = dalloc(1);
        readAt<<<1, 32>>>(b, -1, out);
        CK(cudaDeviceSynchronize());
        (void)a; printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "overflow_far")) {  // 64 KiB past the end of a 4000-byte buffer
        float* a = dalloc(n);
        writeAt<<<1, 32>>>(a, 16384 + n);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "uaf")) {
        float *a = dalloc(n), *out = dalloc(1);
        CK(cudaFree(a));
        readAt<<<1, 32>>>(a, 10, out);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "uaf_delayed")) {  // freed, then 1000 other allocations, then used
        float *a = dalloc(n), *out = dalloc(1);
        CK(cudaFree(a));
        std::vector<float*> others;
        for (int i = 0; i < 1000; i++) others.push_back(dalloc(n));
        writeAt<<<1, 32>>>(a, 10);
        CK(cudaDeviceSynchronize());
        for (float* p : others) CK(cudaFree(p));
        (void)out; printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "interior_clean") || !strcmp(c, "interior_underflow")) {
        // A pointer into the middle of a buffer, read below it: inside the buffer (clean), then
        // one element before the buffer's start (BUG in interior_underflow).
        float *a = dalloc(n), *out = dalloc(1);
        readAt<<<1, 32>>>(a + 500, -500, out);
        readAt<<<1, 32>>>(a + 500, 499, out);
        if (!strcmp(c, "interior_underflow")) readAt<<<1, 32>>>(a + 500, -501, out);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "coop_clean") || !strcmp(c, "coop_overflow")) {
        // A cooperative launch (cuLaunchCooperativeKernel): its pointer arguments carry bounds
        // like any launch's; one element past the end in coop_overflow (BUG).
        float* a = dalloc(n);
        long idx = !strcmp(c, "coop_overflow") ? n : n - 1;
        void* args[] = {&a, &idx};
        CK(cudaLaunchCooperativeKernel((void*)writeAt, dim3(1), dim3(32), args, 0, 0));
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "graph_uaf") || !strcmp(c, "graph_clean")) {
        // A launch captured into a graph, replayed once while its buffer is live and once after
        // the buffer was freed (BUG in graph_uaf): the replay must not run on stale bounds.
        float *a = dalloc(n), *out = dalloc(1);
        cudaStream_t st; CK(cudaStreamCreate(&st));
        cudaGraph_t g; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        readAt<<<1, 32, 0, st>>>(a, 10, out);
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
        if (!strcmp(c, "graph_uaf")) {
            CK(cudaFree(a));
            CK(cudaGraphLaunch(ge, st)); CK(cudaStreamSynchronize(st));
        }
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "double_free")) {
        float* a = dalloc(n);
        CK(cudaFree(a));
        cudaError_t e = cudaFree(a);  // BUG
        printf("second free returned %d\n", (int)e); return 0;
    }
    if (!strcmp(c, "memcpy_overflow")) {
        float* a = dalloc(n);
        std::vector<float> h(n + 64);
        CK(cudaMemcpy(a, h.data(), (n + 64) * 4, cudaMemcpyHostToDevice));  // BUG: 256 bytes too many
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "memcpy2d_clean") || !strcmp(c, "memcpy2d_overflow") || !strcmp(c, "memset2d_overflow")) {
        // A pitched 100 x 10 float image; the buggy variants touch an 11th row.
        float* img; size_t pitch;
        CK(cudaMallocPitch((void**)&img, &pitch, 100 * 4, 10));
        std::vector<float> h(100 * 11, 1.0f);
        size_t rows = !strcmp(c, "memcpy2d_clean") ? 10 : 11;
        if (!strcmp(c, "memset2d_overflow")) CK(cudaMemset2D(img, pitch, 0, 100 * 4, rows));  // BUG: one row too many
        else CK(cudaMemcpy2D(img, pitch, h.data(), 100 * 4, 100 * 4, rows, cudaMemcpyHostToDevice));  // BUG when rows == 11
        CK(cudaMemcpy2D(h.data(), 100 * 4, img, pitch, 100 * 4, 10, cudaMemcpyDeviceToHost));
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "memcpy_batch_overflow") || !strcmp(c, "memcpy_batch_clean")) {
        // Two copies in one batch; the second writes 256 bytes past its destination when buggy.
        float* a = dalloc(n);
        float* b = dalloc(n);
        std::vector<float> h(n + 64, 1.0f);
        void* dsts[2] = {a, b};
        const void* srcs[2] = {h.data(), h.data()};
        size_t sizes[2] = {n * 4, (size_t)(!strcmp(c, "memcpy_batch_clean") ? n : n + 64) * 4};  // BUG: 64 floats too many
        cudaMemcpyAttributes attr = {};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t idx = 0;
        cudaStream_t st;
        CK(cudaStreamCreate(&st));
        CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, st));
        CK(cudaStreamSynchronize(st));
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "mgpu_clean") || !strcmp(c, "mgpu_overflow")) {
        // Two GPUs: a buffer and a kernel on each, then a peer copy. Device 0 is used first (it
        // holds gasan's pool); the overflow is there. Device 1's memory passes through unchecked.
        int nd = 0;
        CK(cudaGetDeviceCount(&nd));
        if (nd < 2) { printf("only %d device: nothing to do\nresult ok\n", nd); return 0; }
        CK(cudaSetDevice(0));
        float* a = dalloc(n);
        CK(cudaSetDevice(1));
        float* b = dalloc(n);
        writeAt<<<1, 32>>>(b, n - 1);
        CK(cudaDeviceSynchronize());
        CK(cudaSetDevice(0));
        writeAt<<<1, 32>>>(a, !strcmp(c, "mgpu_clean") ? n - 1 : n);  // BUG in mgpu_overflow
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpyPeer(b, 1, a, 0, n * sizeof(float)));
        CK(cudaSetDevice(1));
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "tagged_api")) {  // blocks of every tag (small and large): the APIs take their pointers
        typedef int (*GetRange)(unsigned long long*, size_t*, unsigned long long);
        GetRange get_range = nullptr;
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void**)&get_range, 12000, cudaEnableDefault, &q));
        const size_t sizes[8] = {1000, 1000, 1000, 1000, 1 << 20, 1 << 20, 1 << 20, 1 << 20};
        float* p[8];
        for (int i = 0; i < 8; i++) p[i] = dalloc(sizes[i]);
        for (int i = 0; i < 8; i++) {
            cudaPointerAttributes a;
            CK(cudaPointerGetAttributes(&a, p[i] + 5));
            if (a.type != cudaMemoryTypeDevice || a.device != 0) { printf("attributes of block %d: type %d device %d\n", i, (int)a.type, a.device); return 4; }
            unsigned long long base = 0; size_t len = 0;
            if (!get_range || get_range(&base, &len, (unsigned long long)(p[i] + 5)) != 0 || base != (unsigned long long)p[i] || len != sizes[i] * 4) {
                printf("address range of block %d: %llx+%zu, want %p+%zu\n", i, base, len, (void*)p[i], sizes[i] * 4); return 4;
            }
            CK(cudaMemset(p[i], 0, sizes[i] * 4));
            scale<<<(unsigned)((sizes[i] + 255) / 256), 256>>>(p[i], 0.0f, (int)sizes[i]);
        }
        // Copies between blocks of different tags, both directions, and back to the host.
        std::vector<float> h(1000, 3.0f), back(1000);
        CK(cudaMemcpy(p[0], h.data(), 4000, cudaMemcpyHostToDevice));
        for (int i = 1; i < 8; i++) CK(cudaMemcpy(p[i], p[i - 1], 4000, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpyAsync(back.data(), p[7], 4000, cudaMemcpyDeviceToHost, 0));
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < 1000; i++) if (back[i] != 3.0f) { printf("copy chain wrong at %d\n", i); return 4; }
        for (int i = 0; i < 8; i++) CK(cudaFree(p[i]));
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "managed_api") || !strcmp(c, "managed_overflow")) {
        // Managed memory as programs use it: CPU writes, kernels, CPU reads after a sync, copies,
        // memset, prefetch and advice (both CUDA 13 location forms), stream attachment and pointer
        // attributes, small and large blocks, both attach flags. managed_overflow: one store past.
        typedef int (*GetAttr)(void*, int, unsigned long long);
        GetAttr get_attr = nullptr;
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", (void**)&get_attr, 12000, cudaEnableDefault, &q));
        const size_t sizes[3] = {1000, (1 << 20) - 64, 3000};  // block 1: 4 MiB less 256 bytes, so one past its end is in its own last chunk
        const unsigned flags[3] = {cudaMemAttachGlobal, cudaMemAttachGlobal, cudaMemAttachHost};
        float* m[3];
        cudaStream_t st;
        CK(cudaStreamCreate(&st));
        for (int i = 0; i < 3; i++) {
            CK(cudaMallocManaged(&m[i], sizes[i] * 4, flags[i]));
            for (size_t k = 0; k < sizes[i]; k++) m[i][k] = (float)k;  // CPU writes
            cudaPointerAttributes a;
            CK(cudaPointerGetAttributes(&a, m[i] + 5));
            unsigned managed = 0, mtype = 0;
            if (!get_attr || get_attr(&managed, 8, (unsigned long long)(m[i] + 5)) != 0 || get_attr(&mtype, 2, (unsigned long long)(m[i] + 5)) != 0) { printf("cuPointerGetAttribute failed\n"); return 4; }
            printf("managed block %d: cudaPointerGetAttributes type %d device %d, IS_MANAGED %u, MEMORY_TYPE %u\n", i, (int)a.type, a.device, managed, mtype);
            if (a.type != cudaMemoryTypeManaged || a.devicePointer != (void*)(m[i] + 5) || a.hostPointer != (void*)(m[i] + 5) || managed != 1) { printf("attributes of managed block %d wrong\n", i); return 4; }
        }
        cudaMemLocation dev = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
        CK(cudaMemAdvise(m[1], sizes[1] * 4, cudaMemAdviseSetPreferredLocation, dev));
        CK(cudaMemAdvise(m[0], sizes[0] * 4, cudaMemAdviseSetReadMostly, dev));
        CK(cudaMemPrefetchAsync(m[1], sizes[1] * 4, dev, 0, st));
        // Block 2 goes to the GPU too but is read by the CPU with no prefetch back (a CPU fault).
        CK(cudaMemPrefetchAsync(m[2], sizes[2] * 4, dev, 0, st));
        CK(cudaStreamAttachMemAsync(st, m[2], 0, cudaMemAttachSingle));
        CK(cudaStreamSynchronize(st));
        int last = !strcmp(c, "managed_overflow") ? (int)sizes[1] : (int)sizes[1] - 1;
        scale<<<(unsigned)((sizes[1] + 255) / 256), 256, 0, st>>>(m[1], 2.0f, (int)sizes[1]);
        scale<<<(unsigned)((sizes[2] + 255) / 256), 256, 0, st>>>(m[2], 3.0f, (int)sizes[2]);
        writeAt<<<1, 32, 0, st>>>(m[1], last);  // BUG in managed_overflow: one past the end
        CK(cudaStreamSynchronize(st));
        CK(cudaMemPrefetchAsync(m[1], sizes[1] * 4, host, 0, st));
        CK(cudaStreamSynchronize(st));
        for (size_t k = 0; k + 1 < sizes[1]; k++) if (m[1][k] != 2.0f * k) { printf("managed block 1 wrong at %zu: %g\n", k, m[1][k]); return 4; }
        for (size_t k = 0; k < sizes[2]; k++) if (m[2][k] != 3.0f * k) { printf("managed block 2 wrong at %zu\n", k); return 4; }
        if (m[1][sizes[1] - 1] != 42.0f) { printf("kernel store to the last element lost\n"); return 4; }
        // Copies and sets through the driver, between managed, device and host memory.
        float* d = dalloc(sizes[0]);
        std::vector<float> h(sizes[0]);
        CK(cudaMemcpy(d, m[0], sizes[0] * 4, cudaMemcpyDefault));
        CK(cudaMemset(m[0], 0, sizes[0] * 4));
        CK(cudaMemcpy(h.data(), d, sizes[0] * 4, cudaMemcpyDeviceToHost));
        CK(cudaDeviceSynchronize());
        for (size_t k = 0; k < sizes[0]; k++) if (h[k] != (float)k || m[0][k] != 0.0f) { printf("copy/set wrong at %zu\n", k); return 4; }
        for (int i = 0; i < 3; i++) CK(cudaFree(m[i]));
        CK(cudaFree(d));
        CK(cudaStreamDestroy(st));
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "managed_handlers")) {
        // A program that sets its own SIGSEGV handler after managed memory went to the GPU, then
        // reads that memory from several host threads at once: every read sees the kernel's
        // values (gasan moves the block back on the CPU fault; its handler stays in front of the
        // program's), and the program's handler still gets the program's own fault, once.
        static char* guard;
        static volatile int handler_calls;
        struct Local {
            static void on_segv(int, siginfo_t* si, void*) {
                if ((char*)si->si_addr == guard) handler_calls++;
                mprotect(guard, 4096, PROT_READ | PROT_WRITE);
            }
        };
        const int n = 1 << 16;
        float* m;
        CK(cudaMallocManaged(&m, n * 4));
        for (int k = 0; k < n; k++) m[k] = (float)k;
        cudaMemLocation dev = {cudaMemLocationTypeDevice, 0};
        for (int round = 0; round < 2; round++) {
            CK(cudaMemPrefetchAsync(m, n * 4, dev, 0, 0));
            scale<<<(n + 255) / 256, 256>>>(m, 2.0f, n);
            CK(cudaDeviceSynchronize());
            if (round == 0) {
                struct sigaction act, now;
                memset(&act, 0, sizeof act);
                act.sa_sigaction = Local::on_segv;
                act.sa_flags = SA_SIGINFO;
                sigemptyset(&act.sa_mask);
                if (sigaction(SIGSEGV, &act, nullptr) != 0) { printf("sigaction failed\n"); return 4; }
                sigaction(SIGSEGV, nullptr, &now);
                if (now.sa_sigaction != Local::on_segv) { printf("the program's handler does not read back\n"); return 4; }
            }
            float want = round == 0 ? 2.0f : 4.0f;
            std::vector<int> bad(8, -1);
            std::vector<std::thread> readers;
            for (int t = 0; t < 8; t++)
                readers.emplace_back([&, t] { for (int k = t; k < n; k += 8) if (m[k] != want * k) { bad[t] = k; return; } });
            for (auto& r : readers) r.join();
            for (int t = 0; t < 8; t++) if (bad[t] >= 0) { printf("round %d: thread %d read a wrong value at %d\n", round, t, bad[t]); return 4; }
        }
        guard = (char*)mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        volatile char c0 = guard[0];
        (void)c0;
        CK(cudaFree(m));
        if (handler_calls != 1) { printf("the program's handler ran %d times for its one fault\n", handler_calls); return 4; }
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "hostalloc_api") || !strcmp(c, "hostalloc_overflow")) {
        // Pinned host memory as programs use it: mapped (zero-copy) kernel access, async copies to
        // and from it on a stream, the device-pointer, flags and attribute queries, both
        // allocators. hostalloc_overflow: a kernel stores one past a mapped buffer.
        const int n = 1000;
        float *h, *g, *d = dalloc(n);
        CK(cudaHostAlloc(&h, n * 4, cudaHostAllocMapped | cudaHostAllocPortable));
        CK(cudaMallocHost(&g, n * 4));
        float* hd = nullptr;
        CK(cudaHostGetDevicePointer(&hd, h, 0));
        unsigned fl = 0;
        CK(cudaHostGetFlags(&fl, h));
        cudaPointerAttributes a;
        CK(cudaPointerGetAttributes(&a, h + 3));
        printf("pinned: device pointer %s, flags %u, attributes type %d host %p device %p\n", hd == h ? "same" : "differs", fl, (int)a.type, a.hostPointer, a.devicePointer);
        if (hd != h || !(fl & cudaHostAllocMapped) || a.type != cudaMemoryTypeHost || a.hostPointer != (void*)(h + 3)) { printf("pinned host queries wrong\n"); return 4; }
        for (int i = 0; i < n; i++) { h[i] = (float)i; g[i] = 0.0f; }
        cudaStream_t st;
        CK(cudaStreamCreate(&st));
        scale<<<(n + 255) / 256, 256, 0, st>>>(hd, 2.0f, n);                 // zero-copy kernel
        CK(cudaMemcpyAsync(d, h, n * 4, cudaMemcpyHostToDevice, st));       // pinned -> device
        scale<<<(n + 255) / 256, 256, 0, st>>>(d, 3.0f, n);
        CK(cudaMemcpyAsync(g, d, n * 4, cudaMemcpyDeviceToHost, st));       // device -> pinned
        writeAt<<<1, 32, 0, st>>>(hd, !strcmp(c, "hostalloc_overflow") ? n : n - 1);  // BUG in hostalloc_overflow
        CK(cudaStreamSynchronize(st));
        for (int i = 0; i + 1 < n; i++) if (h[i] != 2.0f * i || g[i] != 6.0f * i) { printf("pinned data wrong at %d: %g %g\n", i, h[i], g[i]); return 4; }
        if (h[n - 1] != 42.0f) { printf("zero-copy store lost\n"); return 4; }
        // Wrong-kind frees are refused and free nothing (the driver's answer, natively too).
        cudaError_t e1 = cudaFree(h), e2 = cudaFreeHost(d);
        cudaGetLastError();
        if (e1 == cudaSuccess || e2 == cudaSuccess) { printf("wrong-kind free accepted: cudaFree(pinned) %d, cudaFreeHost(device) %d\n", (int)e1, (int)e2); return 4; }
        h[0] = 1.0f;  // still ours
        CK(cudaFreeHost(h));
        CK(cudaFreeHost(g));
        CK(cudaFree(d));
        CK(cudaStreamDestroy(st));
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "large_overflow")) {  // 4 MiB buffer, write 64 KiB past its end: lands in the guard gap
        const long m = 1 << 20;
        float* a = dalloc(m);
        writeAt<<<1, 32>>>(a, m + 16384);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "leak")) {  // two buffers never freed (LeakSanitizer-style report with detect_leaks=1)
        float* a = dalloc(n); float* b = dalloc(2 * n);
        vecAdd<<<4, 256>>>(a, b, b, n);
        CK(cudaDeviceSynchronize());
        printf("result ok\n"); return 0;
    }
    if (!strcmp(c, "bench_alloc")) {  // median cost of cudaMalloc(1 KiB) + cudaFree
        const int iters = 5000;
        float* warm = dalloc(256); CK(cudaFree(warm));
        std::vector<double> ta, tf;
        for (int i = 0; i < iters; i++) {
            float* p;
            auto t0 = std::chrono::steady_clock::now();
            CK(cudaMalloc(&p, 1024));
            auto t1 = std::chrono::steady_clock::now();
            CK(cudaFree(p));
            auto t2 = std::chrono::steady_clock::now();
            ta.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            tf.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
        }
        std::sort(ta.begin(), ta.end()); std::sort(tf.begin(), tf.end());
        printf("BENCH alloc_us=%.2f free_us=%.2f\n", ta[iters / 2], tf[iters / 2]);
        return 0;
    }
    if (!strcmp(c, "bench_launch")) {  // median cost of an empty kernel launch
        const int iters = 20000;
        empty<<<1, 1>>>(); CK(cudaDeviceSynchronize());
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; i++) empty<<<1, 1>>>();
        auto t1 = std::chrono::steady_clock::now();
        CK(cudaDeviceSynchronize());
        printf("BENCH launch_us=%.3f\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
        return 0;
    }
    if (!strcmp(c, "bench_launch_args")) {  // median cost of a launch with pointer arguments (tagged under gasan)
        const int iters = 20000;
        float *a = dalloc(n), *out = dalloc(1);
        readAt<<<1, 1>>>(a, 0, out); CK(cudaDeviceSynchronize());
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; i++) readAt<<<1, 1>>>(a, i % n, out);
        auto t1 = std::chrono::steady_clock::now();
        CK(cudaDeviceSynchronize());
        printf("BENCH launch_args_us=%.3f\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
        return 0;
    }
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
}
