// Times hand-made variants of one checked kernel against each other on the GPU, without gasan-run:
// each PTX file is JIT-loaded, its __gasan_ctl (if any) pointed at a private shadow that grants every
// byte of the scenario's buffers, and the scenario's launches timed with CUDA events. Rounds
// interleave the variants so clock and thermal drift hit them alike; the result per variant is the
// median over rounds of each round's median.
//   ptxtime SCENARIO ROUNDS FILE.ptx...      prints: VARIANT name=<file> median_ms=<ms> ratio=<x first>
// Scenarios (the shapes of benches/src): stencil2d (also stencil2d_shared), transpose, histogram.
#include <cuda.h>
#include "gasan_abi.h"  // the control block layout (benches/variants/build.sh: gasan-ptx abi)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_ = nullptr; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); exit(3); } } while (0)

static std::string slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    std::string s; char buf[65536]; size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

// The name of the module's first .entry.
static std::string first_entry(const std::string& ptx) {
    size_t at = ptx.find(".entry ");
    if (at == std::string::npos) { fprintf(stderr, "no .entry\n"); exit(2); }
    at += 7;
    size_t end = ptx.find_first_of("( \t\n", at);
    return ptx.substr(at, end - at);
}

struct Variant { std::string name; CUmodule mod; CUfunction fn; std::vector<float> medians; };

int main(int argc, char** argv) {
    if (argc < 4) { fprintf(stderr, "usage: ptxtime SCENARIO ROUNDS FILE.ptx...\n"); return 2; }
    std::string scen = argv[1];
    int rounds = atoi(argv[2]);
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));

    // One region holds every buffer, so one shadow window covers them.
    size_t bytes_a, bytes_b;
    if (scen == "stencil2d") { bytes_a = bytes_b = 4096ull * 4096 * 4; }
    else if (scen == "transpose") { bytes_a = bytes_b = 8192ull * 8192 * 4; }
    else if (scen == "histogram") { bytes_a = 4096 * 4; bytes_b = (16ull << 20) * 4; }
    else { fprintf(stderr, "unknown scenario %s\n", scen.c_str()); return 2; }
    size_t region_size = bytes_a + bytes_b + (1 << 20);
    // The aligned form needs the region inside one 4 GiB window: allocate until one is (the
    // straddling ones stay allocated, so the next try lands elsewhere).
    CUdeviceptr region = 0;
    for (int tries = 0; tries < 64; tries++) {
        CK(cuMemAlloc(&region, region_size));
        if ((region >> 32) == ((region + region_size - 1) >> 32)) break;
        region = 0;
    }
    if (!region) { fprintf(stderr, "no region inside one 4 GiB window\n"); return 4; }
    CUdeviceptr a = region, b = region + ((bytes_a + 65535) & ~65535ull);
    CUdeviceptr shadow; size_t shadow_size = (region_size >> GASAN_SHADOW_SHIFT_S8) + 2;
    CK(cuMemAlloc(&shadow, shadow_size));
    CK(cuMemsetD8(shadow, GASAN_SHADOW_FULL_GRANULE_S8, shadow_size));  // every granule wholly addressable
    // The aligned-pool form: in-pool test on the high words, shadow at base + low 32 bits of
    // addr >> shift. The pool is the region's 4 GiB window.
    unsigned char ctl[GASAN_CTL_SIZE] = {0};
    auto put = [&](int at, unsigned long long v) { memcpy(ctl + at, &v, 8); };
    const unsigned long long pool_base = region & ~0xffffffffull;
    put(GASAN_CTL_POOL_BASE, pool_base);
    put(GASAN_CTL_POOL_SIZE, 1ull << 32);
    put(GASAN_CTL_SHADOW_BASE, shadow - ((region >> GASAN_SHADOW_SHIFT_S8) & 0xffffffffull));
    // Extent table (one {start, end} entry per 2 MiB block from the pool base): a's blocks name a,
    // b's name b (a block holding both names b), as gasan's pool names each large allocation's
    // blocks.
    {
        const int shift = 21;
        size_t entries = ((region + region_size - pool_base) >> shift) + 1;
        static_assert(GASAN_EXTENT_ENTRY_SIZE == 2 * sizeof(unsigned long long), "entry is {start, end}");
        std::vector<unsigned long long> t(entries * 2, 0);
        for (int k = 0; k < 2; k++) {
            CUdeviceptr lo = k ? b : a; size_t n = k ? bytes_b : bytes_a;
            for (size_t i = (lo - pool_base) >> shift; i <= (lo + n - 1 - pool_base) >> shift; i++) { t[2 * i] = lo; t[2 * i + 1] = lo + n; }
        }
        CUdeviceptr table; CK(cuMemAlloc(&table, entries * GASAN_EXTENT_ENTRY_SIZE));
        CK(cuMemcpyHtoD(table, t.data(), entries * GASAN_EXTENT_ENTRY_SIZE));
        put(GASAN_CTL_EXTENT_TABLE, table);
        put(GASAN_CTL_EXTENT_SHIFT, shift);
    }
    // Only the aligned form is exercised (gasan-run uses it whenever its pool allows, as on the H100).
    // Fill the input with small floats / indices.
    {
        std::vector<unsigned> h(bytes_b / 4); unsigned s = 1;
        for (auto& v : h) { s = s * 1664525u + 1013904223u; v = scen == "histogram" ? (s >> 4) : 0x3c000000u | ((s >> 9) & 0x3fffff); }
        CK(cuMemcpyHtoD(b, h.data(), bytes_b));
        CK(cuMemsetD8(a, 0, bytes_a));
    }
    std::vector<Variant> vs;
    for (int i = 3; i < argc; i++) {
        Variant v; v.name = argv[i];
        std::string ptx = slurp(argv[i]);
        CK(cuModuleLoadData(&v.mod, ptx.c_str()));
        CK(cuModuleGetFunction(&v.fn, v.mod, first_entry(ptx).c_str()));
        CUdeviceptr g; size_t gs;
        if (cuModuleGetGlobal(&g, &gs, v.mod, GASAN_CTL_SYMBOL) == CUDA_SUCCESS) CK(cuMemcpyHtoD(g, ctl, sizeof ctl));
        vs.push_back(v);
    }
    auto region_run = [&](CUfunction fn) {
        if (scen == "stencil2d") {
            int w = 4096, h = 4096;
            void* p1[] = {&a, &b, &w, &h}; void* p2[] = {&b, &a, &w, &h};
            CK(cuLaunchKernel(fn, w / 32, h / 8, 1, 32, 8, 1, 0, 0, p1, nullptr));
            CK(cuLaunchKernel(fn, w / 32, h / 8, 1, 32, 8, 1, 0, 0, p2, nullptr));
        } else if (scen == "transpose") {
            int n = 8192;
            void* p[] = {&a, &b, &n};
            CK(cuLaunchKernel(fn, n / 32, n / 32, 1, 32, 8, 1, 0, 0, p, nullptr));
        } else {
            size_t n = 16u << 20;
            void* p[] = {&a, &b, &n};
            CK(cuMemsetD32Async(a, 0, 4096, 0));
            CK(cuLaunchKernel(fn, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, 0, p, nullptr));
        }
    };
    CUevent e0, e1; CK(cuEventCreate(&e0, 0)); CK(cuEventCreate(&e1, 0));
    for (auto& v : vs) { for (int i = 0; i < 3; i++) region_run(v.fn); }
    CK(cuCtxSynchronize());
    const int reps = 21;
    for (int r = 0; r < rounds; r++) {
        for (auto& v : vs) {
            std::vector<float> t;
            for (int i = 0; i < reps; i++) {
                CK(cuEventRecord(e0, 0)); region_run(v.fn); CK(cuEventRecord(e1, 0)); CK(cuEventSynchronize(e1));
                float ms; CK(cuEventElapsedTime(&ms, e0, e1)); t.push_back(ms);
            }
            std::sort(t.begin(), t.end());
            v.medians.push_back(t[t.size() / 2]);
        }
    }
    double base = 0;
    for (auto& v : vs) {
        std::sort(v.medians.begin(), v.medians.end());
        double m = v.medians[v.medians.size() / 2];
        if (base == 0) base = m;
        int regs = 0; CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, v.fn));
        printf("VARIANT %-40s median_ms=%.4f ratio=%.3f regs=%d\n", v.name.c_str(), m, m / base, regs);
    }
    return 0;
}
