// managed_matrix_overflow: a vertical blur over a 4 MiB managed image (advised and prefetched to the
// GPU) writes its output shifted down one row, so the last row lands past the end of the output.
// ./managed_matrix_overflow runs the buggy variant, ./managed_matrix_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_blur(const float* in, float* out, int w, int h, int shift) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float s = in[y * w + x] + (y + 1 < h ? in[(y + 1) * w + x] : 0.0f);
    out[(y + shift) * w + x] = 0.5f * s;  // BUG:managed_matrix_overflow
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int w = 1024, h = 1024;
    const size_t bytes = (size_t)w * h * sizeof(float);
    float *in, *out;
    CK(cudaMallocManaged(&in, bytes));
    CK(cudaMallocManaged(&out, bytes));
    for (int i = 0; i < w * h; i++) in[i] = (float)(i % 97);
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0};
    CK(cudaMemAdvise(in, bytes, cudaMemAdviseSetReadMostly, gpu));
    CK(cudaMemPrefetchAsync(in, bytes, gpu, 0, 0));
    CK(cudaMemPrefetchAsync(out, bytes, gpu, 0, 0));
    k_blur<<<dim3(w / 32, h / 8), dim3(32, 8)>>>(in, out, w, h, clean ? 0 : 1);
    SYNC();
    for (int y = 0; y + 1 < h; y += 97)
        for (int x = 0; x < w; x += 31)
            if (out[y * w + x] != 0.5f * (in[y * w + x] + in[(y + 1) * w + x])) { printf("wrong result at %d,%d\n", x, y); return 4; }
    CK(cudaFree(in));
    CK(cudaFree(out));
    return done();
}
