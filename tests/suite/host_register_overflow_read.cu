// host_register_overflow_read: a kernel averages a window of host memory the program registered
// (cudaHostRegister of a malloc'd buffer, reached at its host address) and reads one element past
// the registered range. Checked in kernels with outside_checks=1.
// ./host_register_overflow_read runs the buggy variant, ./host_register_overflow_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_window_mean(const double* samples, int n, int window, double* means) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double s = 0;
    for (int k = 0; k < window; k++) s += samples[i + k];  // BUG:host_register_overflow_read
    means[i] = s / window;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 3000, window = 4;
    // The buffer holds n + window - 1 samples; the buggy variant's last windows run one past it.
    const int held = n + window - 1;
    double* samples = (double*)malloc(held * sizeof(double) + 64);
    for (int i = 0; i < held; i++) samples[i] = i;
    CK(cudaHostRegister(samples, held * sizeof(double), cudaHostRegisterDefault));
    double* means = dmalloc<double>(n + 1);
    int m = clean ? n : n + 1;
    k_window_mean<<<(m + 255) / 256, 256>>>(samples, m, window, means);
    SYNC();
    double got;
    CK(cudaMemcpy(&got, means + n - 1, sizeof got, cudaMemcpyDeviceToHost));
    if (clean && got != (n - 1) + 1.5) { printf("wrong mean %g\n", got); return 4; }
    CK(cudaHostUnregister(samples));
    free(samples);
    return done();
}
