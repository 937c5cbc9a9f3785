// The application links PTX itself with the driver's cuLink* API (as JIT-heavy frameworks do), then
// runs a kernel from each input. Usage: link {clean|overflow|file-overflow} [PTX_DIR]
// Driver entry points come from cudart's cudaGetDriverEntryPointByVersion (no -lcuda needed).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

template <class F> static F entry(const char* name) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess || !p) {
        fprintf(stderr, "no driver entry point %s\n", name);
        exit(3);
    }
    return reinterpret_cast<F>(p);
}

static std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

#define CKD(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, (int)r_); return 2; } } while (0)

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: link {clean|overflow|file-overflow} [PTX_DIR]\n"); return 2; }
    std::string mode = argv[1], self = argv[0];
    // PTX_DIR defaults to the directory of this program.
    std::string dir = argc > 2 ? argv[2] : (self.find('/') == std::string::npos ? "." : self.substr(0, self.rfind('/')));
    auto linkCreate = entry<decltype(&cuLinkCreate)>("cuLinkCreate");
    auto linkAddData = entry<decltype(&cuLinkAddData)>("cuLinkAddData");
    auto linkAddFile = entry<decltype(&cuLinkAddFile)>("cuLinkAddFile");
    auto linkComplete = entry<decltype(&cuLinkComplete)>("cuLinkComplete");
    auto linkDestroy = entry<decltype(&cuLinkDestroy)>("cuLinkDestroy");
    auto moduleLoadData = entry<decltype(&cuModuleLoadData)>("cuModuleLoadData");
    auto moduleGetFunction = entry<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
    auto launchKernel = entry<decltype(&cuLaunchKernel)>("cuLaunchKernel");

    const int n = 1000;
    float* a = nullptr;
    if (cudaMalloc(&a, n * sizeof(float)) != cudaSuccess) return 2;
    cudaMemset(a, 0, n * sizeof(float));

    CUlinkState st;
    CKD(linkCreate(0, nullptr, nullptr, &st));
    std::string pa = dir + "/link_a.ptx", pb = dir + "/link_b.ptx";
    if (mode == "file-overflow") {
        CKD(linkAddFile(st, CU_JIT_INPUT_PTX, pa.c_str(), 0, nullptr, nullptr));
        CKD(linkAddFile(st, CU_JIT_INPUT_PTX, pb.c_str(), 0, nullptr, nullptr));
    } else {
        std::string ta = slurp(pa), tb = slurp(pb);
        CKD(linkAddData(st, CU_JIT_INPUT_PTX, (void*)ta.c_str(), ta.size() + 1, "link_a.ptx", 0, nullptr, nullptr));
        CKD(linkAddData(st, CU_JIT_INPUT_PTX, (void*)tb.c_str(), tb.size() + 1, "link_b.ptx", 0, nullptr, nullptr));
    }
    void* cubin = nullptr;
    size_t size = 0;
    CKD(linkComplete(st, &cubin, &size));
    CUmodule m;
    CKD(moduleLoadData(&m, cubin));
    CKD(linkDestroy(st));
    CUfunction fa, fb;
    CKD(moduleGetFunction(&fa, m, "scaleA"));
    CKD(moduleGetFunction(&fb, m, "writeAtB"));

    CUdeviceptr d = (CUdeviceptr)a;
    int nn = n;
    void* argsA[] = {&d, &nn};
    CKD(launchKernel(fa, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, argsA, nullptr));
    long idx = mode == "clean" ? n - 1 : n;  // one element past the end in the buggy modes
    void* argsB[] = {&d, &idx};
    CKD(launchKernel(fb, 1, 1, 1, 32, 1, 1, 0, nullptr, argsB, nullptr));
    if (cudaDeviceSynchronize() != cudaSuccess) { fprintf(stderr, "kernel failed\n"); return 4; }
    float h[n];
    cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost);
    if (h[0] != 1.0f) { fprintf(stderr, "wrong result %f\n", h[0]); return 5; }
    printf("result ok\n");
    return 0;
}
