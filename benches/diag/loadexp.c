// Driver-only split of a module load (benches/diag/build.sh builds it, run.sh runs it): times
// cuModuleLoadData, cuModuleGetFunction and cuFuncLoad of one cubin, then a second function.
// With a printf pattern of kernel names and a count, also the mean get+load of kernels 2..count+1
// (the per-kernel part of a first launch, averaged over many kernels).
// usage: loadexp FILE KERNEL KERNEL2 [PATTERN COUNT]
//   -> LOADEXP file=... load_us=... getfn_us=... funcload_us=... second_us=... [per_fn_us=...]
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
#define CK(x) do { CUresult r = (x); if (r) { fprintf(stderr, "%s: %d\n", #x, r); return 1; } } while (0)
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  char* b = malloc(n + 1); if (fread(b, 1, n, f) != (size_t)n) return 1; b[n] = 0; fclose(f);
  CUdevice d; CUcontext c; CUdeviceptr p;
  CK(cuInit(0)); CK(cuDeviceGet(&d, 0)); CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  CK(cuMemAlloc(&p, 1 << 20)); CK(cuMemsetD8(p, 0, 1 << 20)); CK(cuCtxSynchronize());
  CUmodule m; CUfunction fn;
  double t0 = now(); CK(cuModuleLoadData(&m, b));
  double t1 = now(); CK(cuModuleGetFunction(&fn, m, argv[2]));
  double t2 = now(); CK(cuFuncLoad(fn));
  double t3 = now();
  CUfunction fn2; CK(cuModuleGetFunction(&fn2, m, argv[3])); CK(cuFuncLoad(fn2)); double t5 = now();
  printf("LOADEXP file=%s load_us=%.1f getfn_us=%.1f funcload_us=%.1f second_us=%.1f", argv[1], t1 - t0, t2 - t1, t3 - t2, t5 - t3);
  if (argc > 5) {
    int count = atoi(argv[5]);
    char name[256];
    double t6 = now();
    for (int i = 2; i < count + 2; i++) {
      snprintf(name, sizeof name, argv[4], i);
      CUfunction g; CK(cuModuleGetFunction(&g, m, name)); CK(cuFuncLoad(g));
    }
    printf(" per_fn_us=%.2f", (now() - t6) / count);
  }
  printf("\n");
  return 0;
}
