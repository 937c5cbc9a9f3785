/* A direct driver-API application (linked with -lcuda, no cudart): loads a PTX module, launches a
 * kernel that writes one element past a cuMemAlloc buffer when asked. gasan sees it through the
 * cu* symbols its preloaded library exports. Usage: drvapp {clean|overflow} [PTX_DIR] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKD(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, (int)r_); return 2; } } while (0)

static char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* b = malloc(n + 1);
    if (fread(b, 1, n, f) != (size_t)n) { fclose(f); free(b); return NULL; }
    b[n] = 0;
    fclose(f);
    return b;
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: drvapp {clean|overflow} [PTX_DIR]\n"); return 2; }
    char dir[4096] = ".";
    if (argc > 2) snprintf(dir, sizeof dir, "%s", argv[2]);
    else if (strrchr(argv[0], '/')) { snprintf(dir, sizeof dir, "%s", argv[0]); *strrchr(dir, '/') = 0; }
    char path[4200];
    snprintf(path, sizeof path, "%s/link_b.ptx", dir);
    char* ptx = slurp(path);
    if (!ptx) { fprintf(stderr, "cannot read %s\n", path); return 2; }
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    CUdeviceptr a;
    CKD(cuInit(0));
    CKD(cuDeviceGet(&dev, 0));
    CKD(cuDevicePrimaryCtxRetain(&ctx, dev));
    CKD(cuCtxSetCurrent(ctx));
    CKD(cuMemAlloc(&a, 1000 * sizeof(float)));
    CKD(cuModuleLoadData(&m, ptx));
    CKD(cuModuleGetFunction(&f, m, "writeAtB"));
    long idx = strcmp(argv[1], "clean") ? 1000 : 999;
    void* args[] = {&a, &idx};
    CKD(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CKD(cuCtxSynchronize());
    CKD(cuMemFree(a));
    printf("result ok\n");
    return 0;
}
