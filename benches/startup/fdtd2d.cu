// FDTD-2D (PolyBench-like): 20 steps of three kernels (ey, ex, hz) plus the source row; 1024².
#include "startup.h"
__global__ void src(float* ey, const float* fict, int t, int ny) { int j = blockIdx.x * blockDim.x + threadIdx.x; if (j < ny) ey[j] = fict[t]; }
__global__ void upd_ey(float* ey, const float* hz, int nx, int ny) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < nx && j < ny) ey[i * ny + j] -= 0.5f * (hz[i * ny + j] - hz[(i - 1) * ny + j]);
}
__global__ void upd_ex(float* ex, const float* hz, int nx, int ny) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nx && j > 0 && j < ny) ex[i * (ny + 1) + j] -= 0.5f * (hz[i * ny + j] - hz[i * ny + j - 1]);
}
__global__ void upd_hz(float* hz, const float* ex, const float* ey, int nx, int ny) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nx - 1 && j < ny - 1)
        hz[i * ny + j] -= 0.7f * (ex[i * (ny + 1) + j + 1] - ex[i * (ny + 1) + j] + ey[(i + 1) * ny + j] - ey[i * ny + j]);
}
int main() {
    const int nx = 1024, ny = 1024, steps = 20;
    float *ex = to_dev(rand_vec(nx * (ny + 1), 1)), *ey = to_dev(rand_vec((nx + 1) * ny, 2)), *hz = to_dev(rand_vec(nx * ny, 3)), *fict = to_dev(rand_vec(steps, 4));
    dim3 blk(32, 8), grd(ny / 32, nx / 8);
    short_run("fdtd2d", [&] {
        for (int t = 0; t < steps; t++) {
            src<<<ny / 256, 256>>>(ey, fict, t, ny); upd_ey<<<grd, blk>>>(ey, hz, nx, ny);
            upd_ex<<<grd, blk>>>(ex, hz, nx, ny); upd_hz<<<grd, blk>>>(hz, ex, ey, nx, ny);
        }
    }, [&] { return sum_dev(hz, nx * ny); });
}
