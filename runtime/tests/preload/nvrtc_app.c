// Compiles CUDA C++ with NVRTC to a cubin, the ways programs reach NVRTC, and writes the cubin for
// runtime/tests/jit_nvrtc.rs to inspect (no GPU needed).
//   nvrtc_app handle LIB OUT    dlopen(LIB, RTLD_LOCAL) and dlsym(handle, ...) (as tests/suite/nvrtc_overflow.cu)
//   nvrtc_app default LIB OUT   first dlsym(RTLD_DEFAULT, ...) as cuda-bindings does, then the handle
//   nvrtc_app_linked linked - OUT   linked with libnvrtc.so.13, direct calls
// Prints `default_before=<0|1>` etc. and `lowered=<name>`; exit status 0 on success.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct _nvrtcProgram* nvrtcProgram;
typedef int (*create_fn)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
typedef int (*add_fn)(nvrtcProgram, const char*);
typedef int (*compile_fn)(nvrtcProgram, int, const char* const*);
typedef int (*size_fn)(nvrtcProgram, size_t*);
typedef int (*get_fn)(nvrtcProgram, char*);
typedef int (*lowered_fn)(nvrtcProgram, const char*, const char**);
typedef int (*destroy_fn)(nvrtcProgram*);

#ifdef LINKED
int nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
int nvrtcAddNameExpression(nvrtcProgram, const char*);
int nvrtcCompileProgram(nvrtcProgram, int, const char* const*);
int nvrtcGetProgramLogSize(nvrtcProgram, size_t*);
int nvrtcGetProgramLog(nvrtcProgram, char*);
int nvrtcGetCUBINSize(nvrtcProgram, size_t*);
int nvrtcGetCUBIN(nvrtcProgram, char*);
int nvrtcGetLoweredName(nvrtcProgram, const char*, const char**);
int nvrtcDestroyProgram(nvrtcProgram*);
#define SYM(type, name) ((type)name)
#else
static void* lib;
static void* sym(const char* name) {
    void* f = dlsym(lib, name);
    if (!f) { fprintf(stderr, "no %s\n", name); exit(3); }
    return f;
}
#define SYM(type, name) ((type)sym(#name))
#endif

static const char* kSource =
    "template <typename T> __global__ void k_store(T* p, long i) { p[i] = (T)1; }\n"
    "extern \"C\" __global__ void k_nvrtc_write(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 3.0f; }\n";

int main(int argc, char** argv) {
    if (argc != 4) { fprintf(stderr, "usage: nvrtc_app handle|default|linked LIB OUT\n"); return 2; }
    const char* mode = argv[1];
#ifndef LINKED
    if (!strcmp(mode, "default"))
        printf("default_before=%d\n", dlsym(RTLD_DEFAULT, "nvrtcCompileProgram") != NULL);
    lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 3; }
    if (!strcmp(mode, "default"))
        printf("default_after_local_open=%d\n", dlsym(RTLD_DEFAULT, "nvrtcCompileProgram") != NULL);
#endif
    nvrtcProgram prog;
    if (SYM(create_fn, nvrtcCreateProgram)(&prog, kSource, "nvrtc_app.cu", 0, NULL, NULL)) { fprintf(stderr, "create failed\n"); return 3; }
    if (SYM(add_fn, nvrtcAddNameExpression)(prog, "k_store<int>")) { fprintf(stderr, "name expression failed\n"); return 3; }
    const char* opts[] = {"--gpu-architecture=sm_90", "-lineinfo"};
    int rc = SYM(compile_fn, nvrtcCompileProgram)(prog, 2, opts);
    size_t n = 0;
    SYM(size_fn, nvrtcGetProgramLogSize)(prog, &n);
    char* log = calloc(n + 1, 1);
    SYM(get_fn, nvrtcGetProgramLog)(prog, log);
    if (rc) { fprintf(stderr, "compile failed (%d): %s\n", rc, log); return 3; }
    const char* lowered = NULL;
    if (SYM(lowered_fn, nvrtcGetLoweredName)(prog, "k_store<int>", &lowered) || !lowered) { fprintf(stderr, "no lowered name\n"); return 3; }
    printf("lowered=%s\n", lowered);
    if (SYM(size_fn, nvrtcGetCUBINSize)(prog, &n)) { fprintf(stderr, "cubin size failed\n"); return 3; }
    char* cubin = malloc(n);
    if (SYM(get_fn, nvrtcGetCUBIN)(prog, cubin)) { fprintf(stderr, "cubin failed\n"); return 3; }
    SYM(destroy_fn, nvrtcDestroyProgram)(&prog);
    FILE* f = fopen(argv[3], "wb");
    if (!f || fwrite(cubin, 1, n, f) != n || fclose(f)) { fprintf(stderr, "cannot write %s\n", argv[3]); return 3; }
    printf("cubin=%zu\n", n);
    return 0;
}
