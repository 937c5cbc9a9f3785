// Sum of squares of 16 M floats: square, per-block partial sums, then one block sums the partials.
#include "startup.h"
__global__ void square(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * x[i]; }
__global__ void partial(const float* y, float* part, int n) {
    __shared__ float s[256];
    float acc = 0;
    for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) acc += y[i];
    s[threadIdx.x] = acc; __syncthreads();
    for (int w = 128; w > 0; w >>= 1) { if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w]; __syncthreads(); }
    if (threadIdx.x == 0) part[blockIdx.x] = s[0];
}
__global__ void final_sum(const float* part, float* out, int m) {
    __shared__ float s[256];
    float acc = 0; for (int i = threadIdx.x; i < m; i += 256) acc += part[i];
    s[threadIdx.x] = acc; __syncthreads();
    for (int w = 128; w > 0; w >>= 1) { if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w]; __syncthreads(); }
    if (threadIdx.x == 0) *out = s[0];
}
int main() {
    const int n = 1 << 24, blocks = 1024;
    float *x = to_dev(rand_vec(n, 1)), *y, *part, *out;
    CK(cudaMalloc(&y, n * 4)); CK(cudaMalloc(&part, blocks * 4)); CK(cudaMalloc(&out, 4));
    short_run("reduce", [&] { square<<<n / 256, 256>>>(x, y, n); partial<<<blocks, 256>>>(y, part, n); final_sum<<<1, 256>>>(part, out, blocks); }, [&] { return sum_dev(out, 1); });
}
