// Steady-state time of each kernel of benches/startup's scan and jacobi2d programs on its own
// (their whole-program steady state sums several kernels; this says which one gasan slows).
// The programs' kernels are compiled in from their sources, their mains renamed away.
//   kernel_times [REPS]   prints: KTIME kernel=<name> us=<median of REPS event-timed launches>
//                         and KTIME kernel=<name>_x20 us=<the same, 20 launches back to back>
#define main scan_main
#include "../startup/scan.cu"
#undef main
#define main jacobi2d_main
#include "../startup/jacobi2d.cu"
#undef main
#include <string>

// Median µs of `reps` launches of `launch`, each between two events, after one warm-up launch;
// with `batch` > 1, of `batch` launches back to back between the events, per launch (the GPU
// never waits for the host's next launch).
template <class F> static float median_us(int reps, F launch, int batch = 1) {
    launch();
    CK(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a)); for (int j = 0; j < batch; j++) launch();
        CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000 / batch);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    // Each kernel alone (its launch waited for), then 20 back to back (`_x20`).
    auto time = [&](const char* k, auto launch) {
        printf("KTIME kernel=%s us=%.2f\n", k, median_us(reps, launch));
        printf("KTIME kernel=%s_x20 us=%.2f\n", k, median_us(reps / 10 + 1, launch, 20));
    };
    {   // scan's three kernels, on scan's sizes
        const int n = 1 << 22, m = n / 1024;
        std::vector<int> h(n); unsigned sd = 7; for (auto& v : h) v = lcg(sd) % 5;
        int *in = to_dev(h), *out, *sums;
        CK(cudaMalloc(&out, n * 4)); CK(cudaMalloc(&sums, m * 4));
        time("scan_blocks", [&] { scan_blocks<<<m, 1024>>>(in, out, sums, n); });
        time("scan_sums", [&] { scan_sums<<<1, 1024>>>(sums, m); });
        time("add_back", [&] { add_back<<<m, 1024>>>(out, sums, n); });
        CK(cudaFree(in)); CK(cudaFree(out)); CK(cudaFree(sums));
    }
    {   // jacobi2d's two steps, on its sizes
        const int n = 2048;
        float *a = to_dev(rand_vec(n * n, 1)), *b = to_dev(rand_vec(n * n, 2));
        dim3 blk(32, 8), grd(n / 32, n / 8);
        time("jacobi_step", [&] { step<<<grd, blk>>>(a, b, n); });
        time("jacobi_step_back", [&] { step_back<<<grd, blk>>>(b, a, n); });
        CK(cudaFree(a)); CK(cudaFree(b));
    }
    return 0;
}
