// mgpu_uaf: a kernel on device 0 writes a freed buffer after device 1 (if present) ran its own kernel.
// ./mgpu_uaf runs the buggy variant, ./mgpu_uaf clean the clean twin. Expectation: tests/expectations.json.
#include "other_device.h"

__global__ void k_mgpu(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 6.0f; }  // BUG:mgpu_uaf

int main(int argc, char** argv) {
    parse_args(argc, argv);
    CK(cudaSetDevice(0));
    float* p = dmalloc<float>(N);
    other_device_work();
    if (!clean) CK(cudaFree(p));
    k_mgpu<<<1, 32>>>(p, 0);
    SYNC();
    return done();
}
