/* Does what cudart does: dlopen libcuda, dlsym cuGetProcAddress_v2, fetch an entry point, call it.
 * Prints what it saw; the test asserts on it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
typedef int (*gpa_t)(const char*, void**, int, unsigned long long, int*);
typedef int (*memcpy_t)(unsigned long long, const void*, unsigned long);
int main(void) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("no libcuda\n"); return 2; }
    gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    void* f = 0; int st = 0;
    int r = gpa("cuMemcpyHtoD", &f, 13000, 0, &st);
    void* (*own)(void) = (void* (*)(void))dlsym(h, "fake_memcpy_addr");
    void* direct = own();
    int* calls = (int*)dlsym(h, "fake_calls_memcpy");
    char buf[4] = {0};
    int rc = ((memcpy_t)f)(0x1234, buf, 4);
    /* RTLD_NEXT from the program must still be relative to the program: the next dlsym after the
     * executable is the preloaded one, which is what the program itself calls. */
    void* next_dlsym = dlsym(RTLD_NEXT, "dlsym");
    printf("gpa_rc=%d wrapped=%d rc=%d fake_calls=%d next_dlsym_is_ours=%d unknown=%d\n",
           r, f != direct, rc, *calls, next_dlsym == (void*)dlsym, dlsym(h, "cuNoSuchThing") == 0);
    /* Triton's way to the tensor-map encoder: dlsym on the libcuda handle. */
    typedef int (*tma_t)(void*, unsigned, unsigned, void*, const unsigned long long*, const unsigned long long*, const unsigned*, const unsigned*, unsigned, unsigned, unsigned, unsigned);
    tma_t tma = (tma_t)dlsym(h, "cuTensorMapEncodeTiled");
    void* (*tma_own)(void) = (void* (*)(void))dlsym(h, "fake_tma_addr");
    unsigned long long map[16], dims[1] = {16};
    unsigned box[1] = {16}, es[1] = {1};
    int tma_rc = tma(map, 7, 1, (void*)0x1234, dims, 0, box, es, 0, 0, 0, 0);
    printf("tma_wrapped=%d tma_rc=%d tma_calls=%d\n", (void*)tma != tma_own(), tma_rc, *(int*)dlsym(h, "fake_calls_tma"));
    return 0;
}
