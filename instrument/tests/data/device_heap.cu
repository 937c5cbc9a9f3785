// In-kernel heap use in every form nvcc 13 compiles to the driver's heap calls: malloc/free,
// new/delete (scalar and array), __nv_aligned_device_malloc, and a free in a device function.
struct Pair {
    int a, b;
};

__device__ __noinline__ void release(void *p) { free(p); }

__global__ void heap_kernel(int n, int **keep, float *out) {
    int *p = (int *)malloc(n * sizeof(int));
    if (!p) return;
    for (int i = 0; i < n; ++i) p[i] = i;
    float *q = (float *)__nv_aligned_device_malloc(100, 64);
    q[3] = p[n - 1];
    Pair *s = new Pair;
    s->a = 1;
    int *arr = new int[n];
    arr[0] = s->a;
    keep[threadIdx.x] = arr;
    out[threadIdx.x] = q[3];
    delete s;
    delete[] arr;
    free(q);
    release(p);
}

__global__ void only_free(int **keep) { free(keep[threadIdx.x]); }
