// Shared harness for gasan's benchmarks: CUDA-event timing of a GPU region, median of repeated
// runs after warm-up, one machine-readable result line:
//   BENCH name=<name> median_ms=<ms> reps=<n> checksum=<value>
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %d (%s) at %s:%d\n", (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); exit(3); } } while (0)

// Repetitions: GASAN_BENCH_REPS (default 15), so slow tools can run fewer.
static int bench_reps() {
    const char* s = getenv("GASAN_BENCH_REPS");
    int r = s ? atoi(s) : 15;
    return r > 0 ? r : 1;
}

// Times `region` (which launches work on the default stream) and prints the result line.
template <class F> static void bench_run(const char* name, F region, double checksum_fn()) {
    region();  // warm-up (module load, JIT, caches)
    CK(cudaDeviceSynchronize());
    int reps = bench_reps();
    std::vector<float> t;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a));
        region();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    printf("BENCH name=%s median_ms=%.4f reps=%d checksum=%.6g\n", name, t[t.size() / 2], reps, checksum_fn());
}

static unsigned lcg(unsigned& s) { s = s * 1664525u + 1013904223u; return s; }

// Fills the device buffer `d` of `n` floats with small pseudo-random values from `seed` (the same
// sequence as the benchmarks' own `lcg` loops).
static void fill_random(float* d, int n, unsigned seed) {
    std::vector<float> h(n);
    for (auto& v : h) v = (lcg(seed) >> 8) * 1e-7f;
    CK(cudaMemcpy(d, h.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
}

// A benchmark of one kernel reading `n` floats of pseudo-random input (fill_random(seed)) and
// writing `n` floats: the region is `launch(out, in)`, the checksum `out[100]`.
static float* map_out;
static double map_checksum() { float v; CK(cudaMemcpy(&v, map_out + 100, 4, cudaMemcpyDeviceToHost)); return v; }
template <class L> static void bench_map(const char* name, int n, unsigned seed, L launch) {
    float *in, *out;
    CK(cudaMalloc(&in, (size_t)n * 4)); CK(cudaMalloc(&out, (size_t)n * 4));
    fill_random(in, n, seed);
    map_out = out;
    bench_run(name, [&] { launch(out, in); }, map_checksum);
}
