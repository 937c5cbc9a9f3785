// What the CUDA VMM calls that back gasan's large blocks cost, by how a block is made: mapping a
// 16 MiB range from 8 chunks of 2 MiB (one cuMemMap each, access set per chunk or once over the
// run) against one 16 MiB chunk (one cuMemMap), and unmapping it again; physical chunks are
// created once and reused, as gasan's chunk cache does. Tells whether a block's cost is per call
// or per byte mapped (runtime/results.md, "What an allocation costs").
// usage: vmm_cost [ITERS]  -> VMM way=<...> map_us=<median> unmap_us=<median>
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
#define CK(x) do { CUresult r = (x); if (r) { fprintf(stderr, "%s: %d\n", #x, r); exit(1); } } while (0)
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }
static double median(double* v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }
int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 100;
  CUdevice d; CUcontext c;
  CK(cuInit(0)); CK(cuDeviceGet(&d, 0)); CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = d;
  size_t g = 2 << 20, big = 16 << 20;
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, d}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUmemGenericAllocationHandle small[8], wide;
  for (int i = 0; i < 8; i++) CK(cuMemCreate(&small[i], g, &prop, 0));
  CK(cuMemCreate(&wide, big, &prop, 0));
  // Fresh VA for every iteration, as gasan never maps a block's VA twice.
  CUdeviceptr va; size_t span = big * 2;
  CK(cuMemAddressReserve(&va, span * (size_t)iters * 3, 0, 0, 0));
  double* m = malloc(sizeof(double) * iters); double* u = malloc(sizeof(double) * iters);
  const char* ways[] = {"8x2MiB_access_each", "8x2MiB_access_once", "1x16MiB"};
  for (int w = 0; w < 3; w++) {
    for (int i = 0; i < iters; i++) {
      CUdeviceptr p = va + span * ((size_t)w * iters + i);
      double t0 = now();
      if (w == 2) {
        CK(cuMemMap(p, big, 0, wide, 0)); CK(cuMemSetAccess(p, big, &acc, 1));
      } else {
        for (int k = 0; k < 8; k++) {
          CK(cuMemMap(p + k * g, g, 0, small[k], 0));
          if (w == 0) CK(cuMemSetAccess(p + k * g, g, &acc, 1));
        }
        if (w == 1) CK(cuMemSetAccess(p, big, &acc, 1));
      }
      CK(cuMemsetD8(p, 0, big));
      double t1 = now();
      if (w == 2) CK(cuMemUnmap(p, big));
      else for (int k = 0; k < 8; k++) CK(cuMemUnmap(p + k * g, g));
      double t2 = now();
      m[i] = t1 - t0; u[i] = t2 - t1;
    }
    printf("VMM way=%s map_us=%.1f unmap_us=%.1f (map includes a 16 MiB cuMemsetD8)\n", ways[w], median(m, iters), median(u, iters));
  }
  CUdeviceptr p; double t0 = now(); CK(cuMemAlloc(&p, big)); double t1 = now(); CK(cuMemFree(p)); double t2 = now();
  printf("VMM way=cuMemAlloc_once alloc_us=%.1f free_us=%.1f\n", t1 - t0, t2 - t1);
  return 0;
}
