// pitch_overflow: a kernel over a cudaMallocPitch 2D buffer launched with one row too many.
// ./pitch_overflow runs the buggy variant, ./pitch_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_pitch(float* p, size_t pitch, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) *(float*)((char*)p + y * pitch + x * 4) = 1.0f;  // BUG:pitch_overflow
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p;
    size_t pitch;
    CK(cudaMallocPitch(&p, &pitch, 100 * 4, 50));
    k_pitch<<<clean ? 50 : 51, 128>>>(p, pitch, 100, 51);
    SYNC();
    return done();
}
