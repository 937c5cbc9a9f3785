/* Link-time stand-in for libcuda.so.1 (the pinned toolchain's wheels ship no stub): only the
 * symbols drvapp.c uses. At run time the real driver's libcuda.so.1 is loaded instead. */
#define STUB(name) int name(void) { return 999; }
STUB(cuInit) STUB(cuDeviceGet) STUB(cuDevicePrimaryCtxRetain) STUB(cuCtxSetCurrent) STUB(cuMemAlloc_v2)
STUB(cuModuleLoadData) STUB(cuModuleGetFunction) STUB(cuLaunchKernel) STUB(cuCtxSynchronize) STUB(cuMemFree_v2)
