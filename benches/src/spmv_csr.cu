#include "bench.h"
__global__ void spmv(float* y, const int* rp, const int* ci, const float* v, const float* x, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0;
    for (int k = rp[r]; k < rp[r + 1]; k++) acc += v[k] * x[ci[k]];
    y[r] = acc;
}
static int *rp, *ci; static float *v, *x, *y; static const int rows = 1 << 20, per = 16;
static double check() { float h; CK(cudaMemcpy(&h, y + 77, 4, cudaMemcpyDeviceToHost)); return h; }
int main() {
    std::vector<int> hrp(rows + 1), hci((size_t)rows * per); std::vector<float> hv((size_t)rows * per, 0.5f), hx(rows, 1.0f);
    unsigned s = 13;
    for (int r = 0; r <= rows; r++) hrp[r] = r * per;
    for (auto& c : hci) c = lcg(s) % rows;
    CK(cudaMalloc(&rp, (rows + 1) * 4)); CK(cudaMalloc(&ci, hci.size() * 4)); CK(cudaMalloc(&v, hv.size() * 4));
    CK(cudaMalloc(&x, rows * 4)); CK(cudaMalloc(&y, rows * 4));
    CK(cudaMemcpy(rp, hrp.data(), (rows + 1) * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(ci, hci.data(), hci.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv.data(), hv.size() * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(x, hx.data(), rows * 4, cudaMemcpyHostToDevice));
    bench_run("spmv_csr", [] { spmv<<<rows / 256, 256>>>(y, rp, ci, v, x, rows); }, check);
}
