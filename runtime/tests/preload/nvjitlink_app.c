// Links PTX with nvJitLink to a cubin, the ways programs reach nvJitLink, and writes the cubin for
// runtime/tests/jit_nvrtc.rs to inspect (no GPU needed).
//   nvjitlink_app handle LIB PTX... OUT     dlopen(LIB, RTLD_LOCAL), dlsym(handle, plain names) (as cuda-bindings after its RTLD_DEFAULT try)
//   nvjitlink_app_linked linked - PTX... OUT   linked with libnvJitLink.so.13 through nvJitLink.h's inline functions (versioned names)
// Each PTX file is one input of the link, in order.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void* nvJitLinkHandle;
typedef int (*create_fn)(nvJitLinkHandle*, unsigned, const char**);
typedef int (*add_fn)(nvJitLinkHandle, int, const void*, size_t, const char*);
typedef int (*complete_fn)(nvJitLinkHandle);
typedef int (*size_fn)(nvJitLinkHandle, size_t*);
typedef int (*get_fn)(nvJitLinkHandle, void*);
typedef int (*destroy_fn)(nvJitLinkHandle*);

#ifdef LINKED
int __nvJitLinkCreate_13_0(nvJitLinkHandle*, unsigned, const char**);
int __nvJitLinkAddData_13_0(nvJitLinkHandle, int, const void*, size_t, const char*);
int __nvJitLinkComplete_13_0(nvJitLinkHandle);
int __nvJitLinkGetLinkedCubinSize_13_0(nvJitLinkHandle, size_t*);
int __nvJitLinkGetLinkedCubin_13_0(nvJitLinkHandle, void*);
int __nvJitLinkDestroy_13_0(nvJitLinkHandle*);
#define SYM(type, name) ((type)__##name##_13_0)
#else
static void* lib;
static void* sym(const char* name) {
    void* f = dlsym(lib, name);
    if (!f) { fprintf(stderr, "no %s\n", name); exit(3); }
    return f;
}
#define SYM(type, name) ((type)sym(#name))
#endif

int main(int argc, char** argv) {
    if (argc < 5) { fprintf(stderr, "usage: nvjitlink_app handle|linked LIB PTX... OUT\n"); return 2; }
#ifndef LINKED
    printf("default_before=%d\n", dlsym(RTLD_DEFAULT, "nvJitLinkCreate") != NULL);
    lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 3; }
#endif
    nvJitLinkHandle h;
    const char* opts[] = {"-arch=sm_90"};
    if (SYM(create_fn, nvJitLinkCreate)(&h, 1, opts)) { fprintf(stderr, "create failed\n"); return 3; }
    for (int i = 3; i < argc - 1; i++) {
        FILE* f = fopen(argv[i], "rb");
        if (!f) { fprintf(stderr, "cannot read %s\n", argv[i]); return 3; }
        // One buffer per input, kept to the end: nothing here relies on nvJitLink copying it.
        char* ptx = malloc(1 << 20);
        size_t len = fread(ptx, 1, (1 << 20) - 1, f);
        fclose(f);
        ptx[len] = 0;
        if (SYM(add_fn, nvJitLinkAddData)(h, 2 /* NVJITLINK_INPUT_PTX */, ptx, len + 1, argv[i])) { fprintf(stderr, "add %s failed\n", argv[i]); return 3; }
    }
    if (SYM(complete_fn, nvJitLinkComplete)(h)) { fprintf(stderr, "complete failed\n"); return 3; }
    size_t n = 0;
    if (SYM(size_fn, nvJitLinkGetLinkedCubinSize)(h, &n)) { fprintf(stderr, "size failed\n"); return 3; }
    char* cubin = malloc(n);
    if (SYM(get_fn, nvJitLinkGetLinkedCubin)(h, cubin)) { fprintf(stderr, "cubin failed\n"); return 3; }
    SYM(destroy_fn, nvJitLinkDestroy)(&h);
    FILE* o = fopen(argv[argc - 1], "wb");
    if (!o || fwrite(cubin, 1, n, o) != n || fclose(o)) { fprintf(stderr, "cannot write %s\n", argv[argc - 1]); return 3; }
    printf("cubin=%zu\n", n);
    return 0;
}
