// host_register_after_unregister: a pipeline registers a host staging buffer, lets a kernel read
// it, unregisters it, and launches the next kernel on the same host pointer: the device no longer
// maps those pages (natively a fault, or a read of memory the program handed back).
// ./host_register_after_unregister runs the buggy variant, ./host_register_after_unregister clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_scale(const float* staged, int n, float f, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = staged[i] * f;  // BUG:host_register_after_unregister
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 4096;
    float* staged = (float*)aligned_alloc(4096, n * sizeof(float));
    for (int i = 0; i < n; i++) staged[i] = 1.0f;
    float* out = dmalloc<float>(n);
    CK(cudaHostRegister(staged, n * sizeof(float), cudaHostRegisterDefault));
    k_scale<<<n / 256, 256>>>(staged, n, 2.0f, out);
    SYNC();
    if (!clean) CK(cudaHostUnregister(staged));
    k_scale<<<n / 256, 256>>>(staged, n, 3.0f, out);
    SYNC();
    float got;
    CK(cudaMemcpy(&got, out + n - 1, sizeof got, cudaMemcpyDeviceToHost));
    if (clean && got != 3.0f) { printf("wrong result %g\n", got); return 4; }
    if (clean) CK(cudaHostUnregister(staged));
    free(staged);
    return done();
}
