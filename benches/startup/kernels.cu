// First launches: NK distinct kernels in one module (NK = 1 or 100 at build time).
//   kernels a       process start -> first kernel done: prints STARTUP first_kernel_unix=<realtime s>
//   kernels b N     context and memory set up first, then the first launch of N distinct kernels
//                   (each launched and waited for), then the same N again:
//                   FIRST n=N first_us=<µs> again_us=<µs>
#include "startup.h"
#include <utility>
#ifndef NK
#define NK 100
#endif

template <int K> __global__ void kern(float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = a[i];
        for (int j = 0; j < (K % 4) + 1; j++) x = x * (1.0f + K * 1e-3f) + b[(i + j * (K + 1)) % n];
        a[i] = x;
    }
}

typedef void (*Kern)(float*, const float*, int);
template <int... I> static const Kern* table(std::integer_sequence<int, I...>) {
    static const Kern t[] = {&kern<I>...};
    return t;
}

int main(int argc, char** argv) {
    const Kern* k = table(std::make_integer_sequence<int, NK>());
    const int n = 1 << 12;
    char mode = argc > 1 ? argv[1][0] : 'a';
    if (mode == 'a') {
        float *a, *b;
        CK(cudaMalloc(&a, n * 4)); CK(cudaMalloc(&b, n * 4));
        CK(cudaMemset(a, 0, n * 4)); CK(cudaMemset(b, 0, n * 4));
        k[0]<<<n / 256, 256>>>(a, b, n);
        CK(cudaDeviceSynchronize());
        printf("STARTUP first_kernel_unix=%.6f\n", now_s(CLOCK_REALTIME));
        return 0;
    }
    int N = argc > 2 ? atoi(argv[2]) : NK;
    if (N < 1 || N > NK) { fprintf(stderr, "N must be 1..%d\n", NK); return 2; }
    float* a = to_dev(rand_vec(n, 1));
    float* b = to_dev(rand_vec(n, 2));
    CK(cudaDeviceSynchronize());
    double us[2];
    for (int pass = 0; pass < 2; pass++) {
        double t0 = now_s();
        for (int i = 0; i < N; i++) { k[i]<<<n / 256, 256>>>(a, b, n); CK(cudaDeviceSynchronize()); }
        us[pass] = (now_s() - t0) * 1e6;
    }
    CK(cudaGetLastError());
    printf("FIRST n=%d first_us=%.1f again_us=%.1f checksum=%.6g\n", N, us[0], us[1], sum_dev(a, n));
    return 0;
}
