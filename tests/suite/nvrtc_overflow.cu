// nvrtc_overflow: CUDA C++ compiled at run time by NVRTC straight to a cubin (nvrtcGetCUBIN, SASS
// only), loaded with cuModuleLoadData; its kernel writes one past a buffer (issue 39 item 6: NVRTC
// interposed so the cubin is a checked one). NVRTC is opened at run time (libnvrtc.so.13, or the
// file NVRTC_LIBRARY names): without it the program prints SKIPPED and exits 77.
// ./nvrtc_overflow runs the buggy variant, ./nvrtc_overflow clean the clean twin.
#include <dlfcn.h>
#include "driver_entry.h"

#define STR(x) #x
#define XSTR(x) STR(x)
// `#line` keeps the kernel's line numbers those of this file, so a report names this line.
static const char* kSource = "#line " XSTR(__LINE__) "\n" R"(
extern "C" __global__ void k_nvrtc_write(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 3.0f; }  // BUG:nvrtc_overflow
)";

typedef struct _nvrtcProgram* nvrtcProgram;
typedef int (*create_fn)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
typedef int (*compile_fn)(nvrtcProgram, int, const char* const*);
typedef int (*size_fn)(nvrtcProgram, size_t*);
typedef int (*get_fn)(nvrtcProgram, char*);
typedef int (*destroy_fn)(nvrtcProgram*);
typedef CUresult (*load_fn)(CUmodule*, const void*);
typedef CUresult (*getfn_fn)(CUfunction*, CUmodule, const char*);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
typedef CUresult (*unload_fn)(CUmodule);

static void* nvrtc_sym(void* lib, const char* name) {
    void* f = dlsym(lib, name);
    if (!f) { fprintf(stderr, "libnvrtc has no %s\n", name); exit(3); }
    return f;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const char* names[] = {getenv("NVRTC_LIBRARY"), "libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.13", "libnvrtc.so"};
    void* lib = nullptr;
    for (const char* n : names)
        if (n && (lib = dlopen(n, RTLD_NOW))) break;
    if (!lib) { printf("SKIPPED: no libnvrtc.so.13 (set NVRTC_LIBRARY): %s\n", dlerror()); return 77; }
    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", prop.major, prop.minor);
    nvrtcProgram prog;
    if (((create_fn)nvrtc_sym(lib, "nvrtcCreateProgram"))(&prog, kSource, "nvrtc_overflow.cu", 0, nullptr, nullptr)) { fprintf(stderr, "nvrtcCreateProgram failed\n"); return 3; }
    const char* opts[] = {arch, "-lineinfo"};
    int rc = ((compile_fn)nvrtc_sym(lib, "nvrtcCompileProgram"))(prog, 2, opts);
    size_t n = 0;
    ((size_fn)nvrtc_sym(lib, "nvrtcGetProgramLogSize"))(prog, &n);
    std::vector<char> log(n + 1);
    ((get_fn)nvrtc_sym(lib, "nvrtcGetProgramLog"))(prog, log.data());
    if (rc) { fprintf(stderr, "NVRTC compile failed (%d): %s\n", rc, log.data()); return 3; }
    ((size_fn)nvrtc_sym(lib, "nvrtcGetCUBINSize"))(prog, &n);
    std::vector<char> cubin(n);
    ((get_fn)nvrtc_sym(lib, "nvrtcGetCUBIN"))(prog, cubin.data());
    ((destroy_fn)nvrtc_sym(lib, "nvrtcDestroyProgram"))(&prog);
    // The size on stderr: under gasan the cubin is a checked one, larger, while stdout must match
    // a native run (scripts/concurrent_check.py).
    printf("NVRTC cubin for %s\n", arch + 19);
    fprintf(stderr, "NVRTC cubin: %zu bytes\n", n);
    CK(cudaFree(0));  // the primary context current for the driver calls
    CUmodule mod;
    CUfunction fn;
    CU(driver_fn<load_fn>("cuModuleLoadData")(&mod, cubin.data()));
    CU(driver_fn<getfn_fn>("cuModuleGetFunction")(&fn, mod, "k_nvrtc_write"));
    float* p = dmalloc<float>(N);
    long idx = clean ? N - 1 : N;
    void* params[] = {&p, &idx};
    CU(driver_fn<launch_fn>("cuLaunchKernel")(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    SYNC();
    CK(cudaFree(p));
    CU(driver_fn<unload_fn>("cuModuleUnload")(mod));
    return done();
}
