// mgpu_overflow: a store one past a buffer on device 0 after device 1 (if present) ran its own kernel.
// ./mgpu_overflow runs the buggy variant, ./mgpu_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "other_device.h"

__global__ void k_mgpu(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 6.0f; }  // BUG:mgpu_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    CK(cudaSetDevice(0));
    float* p = dmalloc<float>(N);
    other_device_work();
    k_mgpu<<<1, 32>>>(p, clean ? N - 1 : N);
    SYNC();
    return done();
}
