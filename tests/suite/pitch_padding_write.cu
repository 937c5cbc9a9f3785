// pitch_padding_write: a keypoint at normalized x = 1.0 is drawn one column past the width of a pitched image, into a middle row's padding (heap overflow, write).
// ./pitch_padding_write runs the buggy variant, ./pitch_padding_write clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

struct Keypoint { float u, v; };  // normalized image coordinates

// Thread k sets the pixel of keypoint k in a w x h float image with rows `pitch` bytes apart.
__global__ void k_draw_keypoints(float* img, size_t pitch, int w, int h, const Keypoint* kp, int n) {
    int k = threadIdx.x;
    if (k >= n) return;
    int x = (int)(kp[k].u * w), y = (int)(kp[k].v * h);
    float* rowp = (float*)((char*)img + y * pitch);
    rowp[x] = 1.0f;  // BUG:pitch_padding_write
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int w = 250, h = 64;   // 1000 bytes a row: gasan pads rows to 1024
    float* img;
    size_t pitch;
    CK(cudaMallocPitch(&img, &pitch, w * sizeof(float), h));
    CK(cudaMemset2D(img, pitch, 0, w * sizeof(float), h));
    // The last keypoint sits on the right edge: u = 1.0 maps to column w (byte 1000 of row 32).
    std::vector<Keypoint> kps = {{0.1f, 0.2f}, {0.5f, 0.5f}, {0.75f, 0.9f}, {clean ? 0.999f : 1.0f, 0.5f}};
    Keypoint* dkp = dmalloc<Keypoint>(kps.size());
    CK(cudaMemcpy(dkp, kps.data(), kps.size() * sizeof(Keypoint), cudaMemcpyHostToDevice));
    k_draw_keypoints<<<1, 32>>>(img, pitch, w, h, dkp, (int)kps.size());
    SYNC();
    CK(cudaFree(img));
    return done();
}
