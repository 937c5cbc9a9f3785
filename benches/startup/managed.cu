// A short managed-memory program as tutorials write it: the CPU fills two cudaMallocManaged
// vectors, kernels add and scale them, the CPU reads the result after a sync.
#include "startup.h"
__global__ void add(float* y, const float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += x[i]; }
__global__ void scale(float* y, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= s; }
int main() {
    const int n = 1 << 22;
    float *x, *y;
    CK(cudaMallocManaged(&x, n * 4)); CK(cudaMallocManaged(&y, n * 4));
    for (int i = 0; i < n; i++) { x[i] = 1.0f + (i % 5); y[i] = 2.0f; }
    double sum = 0;
    short_run("managed", [&] {
        add<<<n / 256, 256>>>(y, x, n);
        scale<<<n / 256, 256>>>(y, 0.5f, n);
        add<<<n / 256, 256>>>(y, x, n);
        CK(cudaDeviceSynchronize());
        sum = 0;
        for (int i = 0; i < n; i += 257) sum += y[i];
    }, [&] { return sum; });
}
