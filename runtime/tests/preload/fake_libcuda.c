/* A stand-in libcuda.so.1 for the interposition test: just enough entry points, each recording
 * that it ran. Not a driver: every query answers "no context". */
#include <string.h>
int fake_calls_memcpy = 0;
__attribute__((visibility("protected"))) int cuInit(unsigned f) { (void)f; return 0; }
int cuCtxGetDevice(int* d) { (void)d; return 201; /* CUDA_ERROR_INVALID_CONTEXT */ }
/* protected: the stand-in refers to its own function, as the real driver does, even though gasan exports the same name. */
__attribute__((visibility("protected"))) int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, unsigned long n) { (void)dst; (void)src; (void)n; fake_calls_memcpy++; return 0; }
int cuMemcpyHtoD(unsigned dst, const void* src, unsigned n) { (void)dst; (void)src; (void)n; return 999; }
/* Not a cu* name, so gasan never intercepts it: the stand-in's own address. */
void* fake_memcpy_addr(void) { return (void*)cuMemcpyHtoD_v2; }
__attribute__((visibility("protected"))) int cuGetProcAddress_v2(const char* sym, void** pfn, int ver, unsigned long long flags, int* status) {
    (void)ver; (void)flags;
    if (status) *status = 0;
    if (!strcmp(sym, "cuMemcpyHtoD")) { *pfn = (void*)cuMemcpyHtoD_v2; return 0; }
    if (!strcmp(sym, "cuInit")) { *pfn = (void*)cuInit; return 0; }
    if (!strcmp(sym, "cuGetProcAddress")) { *pfn = (void*)cuGetProcAddress_v2; return 0; }
    *pfn = 0;
    if (status) *status = 1;
    return 500; /* CUDA_ERROR_NOT_FOUND */
}
/* Triton resolves this with dlsym on its libcuda handle (backends/nvidia/driver.c). */
int fake_calls_tma = 0;
__attribute__((visibility("protected"))) int cuTensorMapEncodeTiled(void* map, unsigned dt, unsigned rank, void* addr, const unsigned long long* dims, const unsigned long long* strides,
                                                                    const unsigned* box, const unsigned* estrides, unsigned il, unsigned sw, unsigned l2, unsigned oob) {
    (void)map; (void)dt; (void)rank; (void)addr; (void)dims; (void)strides; (void)box; (void)estrides; (void)il; (void)sw; (void)l2; (void)oob;
    fake_calls_tma++;
    return 0;
}
void* fake_tma_addr(void) { return (void*)cuTensorMapEncodeTiled; }
