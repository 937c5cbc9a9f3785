// pitch_padding_read: a horizontal 3-tap box filter over a pitched 8-bit image runs to the last column and reads one byte into every row's padding (heap overflow, read).
// ./pitch_padding_read runs the buggy variant, ./pitch_padding_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

// Pixel (x, y) of `out` = mean of in[y][x-1 .. x+1], for 1 <= x < xend.
__global__ void k_box3(unsigned char* out, size_t pout, const unsigned char* in, size_t pin, int xend, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < 1 || x >= xend || y >= h) return;
    const unsigned char* r = in + y * pin;
    out[y * pout + x] = (unsigned char)((r[x - 1] + r[x] + r[x + 1]) / 3);  // BUG:pitch_padding_read
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int w = 1000, h = 64;   // 1000 bytes a row: gasan pads rows to 1024
    unsigned char *in, *out;
    size_t pin, pout;
    CK(cudaMallocPitch(&in, &pin, w, h));
    CK(cudaMallocPitch(&out, &pout, w, h));
    CK(cudaMemset2D(in, pin, 90, w, h));
    CK(cudaMemset2D(out, pout, 0, w, h));
    // The interior is 1 .. w-2; running to w-1 reads in[y][w], the first padding byte of each row.
    k_box3<<<dim3((w + 255) / 256, h), 256>>>(out, pout, in, pin, clean ? w - 1 : w, h);
    SYNC();
    CK(cudaFree(in));
    CK(cudaFree(out));
    return done();
}
