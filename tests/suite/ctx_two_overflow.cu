// ctx_two_overflow: two contexts on one device. The primary context (cudart's) does clean work;
// then a second context made with cuCtxCreate is current, and a buffer allocated in it is written
// one past its end (issue 40 item 1: a context's first use sets up its checking).
// ./ctx_two_overflow runs the buggy variant, ./ctx_two_overflow clean the clean twin.
#include "driver_entry.h"

__global__ void k_ctx_write(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 4.0f; }  // BUG:ctx_two_overflow

typedef CUresult (*ctx_create_fn)(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
typedef CUresult (*ctx_destroy_fn)(CUcontext);

int main(int argc, char** argv) {
    parse_args(argc, argv);
    auto ctx_create = driver_fn<ctx_create_fn>("cuCtxCreate");
    auto ctx_destroy = driver_fn<ctx_destroy_fn>("cuCtxDestroy");
    CK(cudaSetDevice(0));
    float* a = dmalloc<float>(N);  // the primary context
    k_ctx_write<<<1, 32>>>(a, N - 1);
    SYNC();
    CUcontext second = nullptr;
    CU(ctx_create(&second, nullptr, 0, 0));  // current from here on; cudart works in it
    float* b = dmalloc<float>(N);
    k_ctx_write<<<1, 32>>>(b, clean ? N - 1 : N);
    SYNC();
    CK(cudaFree(b));
    CU(ctx_destroy(second));
    CK(cudaFree(a));
    return done();
}
