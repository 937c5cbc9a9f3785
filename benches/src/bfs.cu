#include "bench.h"
// Level-synchronous BFS over a random graph (CSR), one thread per vertex per level.
__global__ void level(const int* rp, const int* ci, int* dist, int* changed, int n, int d) {
    int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= n || dist[u] != d) return;
    for (int k = rp[u]; k < rp[u + 1]; k++) {
        int v = ci[k];
        if (dist[v] < 0) { dist[v] = d + 1; *changed = 1; }
    }
}
static int *rp, *ci, *dist, *changed; static const int n = 1 << 20, deg = 8;
static double check() { int h; CK(cudaMemcpy(&h, dist + 1234, 4, cudaMemcpyDeviceToHost)); return h; }
int main() {
    std::vector<int> hrp(n + 1), hci((size_t)n * deg); unsigned s = 17;
    for (int i = 0; i <= n; i++) hrp[i] = i * deg;
    for (auto& c : hci) c = lcg(s) % n;
    CK(cudaMalloc(&rp, (n + 1) * 4)); CK(cudaMalloc(&ci, hci.size() * 4)); CK(cudaMalloc(&dist, n * 4)); CK(cudaMalloc(&changed, 4));
    CK(cudaMemcpy(rp, hrp.data(), (n + 1) * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(ci, hci.data(), hci.size() * 4, cudaMemcpyHostToDevice));
    bench_run("bfs", [] {
        CK(cudaMemset(dist, 0xff, n * 4)); CK(cudaMemset(dist, 0, 4));
        for (int d = 0; d < 12; d++) { level<<<n / 256, 256>>>(rp, ci, dist, changed, n, d); }
    }, check);
}
