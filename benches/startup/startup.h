// Shared helpers of the whole-program benchmarks (benches/run_startup.py): wall clocks, a
// first-region / steady-state harness and one machine-readable line per program:
//   SHORT name=<name> first_ms=<host ms of the first run of the GPU region, first launches
//         included> steady_ms=<median CUDA-event ms of later runs, or nan> reps=<n> checksum=<v>
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %d (%s) at %s:%d\n", (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); exit(3); } } while (0)

static double now_s(clockid_t c = CLOCK_MONOTONIC) {
    timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}

// Steady-state repetitions after the first run: SHORT_REPS (default 0: the program as a user runs it).
static int short_reps() {
    const char* s = getenv("SHORT_REPS");
    return s ? std::max(0, atoi(s)) : 0;
}

// Runs `region` once (timed on the host, first launches included), then SHORT_REPS more times
// (CUDA events, median), and prints the SHORT line with `checksum()`.
template <class F, class C> static void short_run(const char* name, F region, C checksum) {
    CK(cudaDeviceSynchronize());
    double t0 = now_s();
    region();
    CK(cudaDeviceSynchronize());
    double first = (now_s() - t0) * 1e3;
    int reps = short_reps();
    std::vector<float> t;
    if (reps > 0) {
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
        for (int i = 0; i < reps; i++) {
            CK(cudaEventRecord(a)); region(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
            float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
    }
    CK(cudaGetLastError());
    printf("SHORT name=%s first_ms=%.4f steady_ms=%.4f reps=%d checksum=%.6g\n", name, first,
           t.empty() ? 0.0 / 0.0 : t[t.size() / 2], reps, (double)checksum());
}

static unsigned lcg(unsigned& s) { s = s * 1664525u + 1013904223u; return s; }
static std::vector<float> rand_vec(size_t n, unsigned seed) {
    std::vector<float> v(n); for (auto& x : v) x = (lcg(seed) >> 8) * (1.0f / (1 << 24)) - 0.5f; return v;
}
template <class T> static T* to_dev(const std::vector<T>& h) {
    T* d; CK(cudaMalloc(&d, h.size() * sizeof(T)));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); return d;
}
template <class T> static double sum_dev(const T* d, size_t n) {
    std::vector<T> h(n); CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    double s = 0; for (size_t i = 0; i < n; i++) s += (double)h[i] * (1 + (i % 7)); return s;
}
