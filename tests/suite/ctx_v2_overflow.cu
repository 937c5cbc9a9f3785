// ctx_v2_overflow: ctx_two_overflow with the second context made by cuCtxCreate_v2, what
// cuGetProcAddress("cuCtxCreate") answers for CUDA 3.2 to 11.3 (and what programs built with those
// headers link): the context must get the checked module's control block as cuCtxCreate_v4's does
// (issue 40 item 1), so the write one past a buffer allocated in it is reported.
// ./ctx_v2_overflow runs the buggy variant, ./ctx_v2_overflow clean the clean twin.
#include "driver_entry.h"

__global__ void k_ctx_v2_write(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 4.0f; }  // BUG:ctx_v2_overflow

typedef CUresult (*ctx_create_fn)(CUcontext*, unsigned int, CUdevice);
typedef CUresult (*ctx_destroy_fn)(CUcontext);

int main(int argc, char** argv) {
    parse_args(argc, argv);
    auto ctx_create = driver_fn<ctx_create_fn>("cuCtxCreate", 11000);
    auto ctx_destroy = driver_fn<ctx_destroy_fn>("cuCtxDestroy");
    CK(cudaSetDevice(0));
    float* a = dmalloc<float>(N);  // the primary context
    k_ctx_v2_write<<<1, 32>>>(a, N - 1);
    SYNC();
    CUcontext second = nullptr;
    CU(ctx_create(&second, 0, 0));  // current from here on; cudart works in it
    float* b = dmalloc<float>(N);
    k_ctx_v2_write<<<1, 32>>>(b, clean ? N - 1 : N);
    SYNC();
    CK(cudaFree(b));
    CU(ctx_destroy(second));
    CK(cudaFree(a));
    return done();
}
