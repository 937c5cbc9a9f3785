/* A direct driver-API application (linked with -lcuda, no cudart): loads a PTX module, launches a
 * kernel that writes one element past a cuMemAlloc buffer when asked. gasan sees it through the
 * cu* symbols its preloaded library exports. thread_clean / thread_overflow allocate the buffer
 * with cuMemAllocAsync on a stream from a second thread that never made a context current (a call
 * given a stream runs in the stream's context: PyTorch's cudaMallocAsync backend allocates so) and
 * free it there with cuMemFreeAsync.
 * Usage: drvapp {clean|overflow|thread_clean|thread_overflow} [PTX_DIR] */
#include <cuda.h>
#include <pthread.h>
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

struct async_job {
    CUstream stream;
    CUdeviceptr ptr;
    CUresult alloc, set, free;
    int do_free;
};

/* On a thread with no current context: only the stream names one. */
static void* async_on_thread(void* arg) {
    struct async_job* j = arg;
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    if (cur) { j->alloc = CUDA_ERROR_UNKNOWN; return NULL; }
    if (j->do_free) {
        j->free = cuMemFreeAsync(j->ptr, j->stream);
        return NULL;
    }
    j->alloc = cuMemAllocAsync(&j->ptr, 1000 * sizeof(float), j->stream);
    if (j->alloc == CUDA_SUCCESS) j->set = cuMemsetD8Async(j->ptr, 0, 1000 * sizeof(float), j->stream);
    return NULL;
}

static CUresult run_on_thread(struct async_job* j) {
    pthread_t t;
    if (pthread_create(&t, NULL, async_on_thread, j)) return CUDA_ERROR_UNKNOWN;
    pthread_join(t, NULL);
    return CUDA_SUCCESS;
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: drvapp {clean|overflow|thread_clean|thread_overflow} [PTX_DIR]\n"); return 2; }
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
    int threaded = strncmp(argv[1], "thread_", 7) == 0;
    const char* mode = threaded ? argv[1] + 7 : argv[1];
    struct async_job job = {0};
    if (threaded) {
        CKD(cuStreamCreate(&job.stream, CU_STREAM_NON_BLOCKING));
        CKD(run_on_thread(&job));
        CKD(job.alloc);
        CKD(job.set);
        CKD(cuStreamSynchronize(job.stream));
        a = job.ptr;
    } else {
        CKD(cuMemAlloc(&a, 1000 * sizeof(float)));
    }
    CKD(cuModuleLoadData(&m, ptx));
    CKD(cuModuleGetFunction(&f, m, "writeAtB"));
    long idx = strcmp(mode, "clean") ? 1000 : 999;
    void* args[] = {&a, &idx};
    CKD(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CKD(cuCtxSynchronize());
    if (threaded) {
        job.do_free = 1;
        CKD(run_on_thread(&job));
        CKD(job.free);
        CKD(cuStreamSynchronize(job.stream));
        CKD(cuStreamDestroy(job.stream));
    } else {
        CKD(cuMemFree(a));
    }
    printf("result ok\n");
    return 0;
}
