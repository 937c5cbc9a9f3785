// Many host threads loading modules and launching kernels at once: THREADS threads (default 16)
// each run ROUNDS rounds (default 50). In a round a thread writes a small PTX module in memory (the
// kernel `addk`, out[i] = in[i] + K, with K baked into the text as an immediate, different for
// every thread and round, so no two modules are alike), loads it with cuModuleLoadData, launches it
// with cuLaunchKernel on the thread's own stream over 1 to 64K elements, reads the result back,
// checks every element, frees the buffers and unloads the module. Every other round the thread also
// launches the statically compiled kernel `twicePlus` from this file with <<<>>> on the same stream
// and checks it, so cudart's module path and the driver API's run side by side.
//   overflow: thread 0, in its round 3, launches addk with n one larger than `out` holds (1000
//   elements, a 4000-byte buffer; `in` has a spare element), so the kernel writes 4 bytes past the
//   end of `out`: a heap-buffer-overflow "in kernel addk". Without a sanitizer the write lands in
//   the allocation's slack and the program still finishes (and may print "result ok").
// Prints "BENCH mt_load threads=T rounds=R modules_per_s=X" and "result ok", and exits 0, only if
// every call succeeded and every result checked; otherwise it prints what failed (the first 20)
// and exits 4. --print-ptx [K] writes the PTX text addk is loaded from (K defaults to 1) and exits.
// MT_LOAD_PTX_VERSION=X.Y loads addk as PTX X.Y instead of 8.0.
//   usage: mt_load [clean|overflow] [THREADS [ROUNDS]]
//          mt_load --print-ptx [K]
// Built by runtime/gpu/build.sh with the pinned nvcc, linked with -lcuda.
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// The driver-API module. KVAL is replaced by the thread's and round's K (a decimal u32).
static const char kPtxTemplate[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .entry addk(
	.param .u64 addk_param_0,
	.param .u64 addk_param_1,
	.param .u32 addk_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<8>;

	ld.param.u64 	%rd1, [addk_param_0];
	ld.param.u64 	%rd2, [addk_param_1];
	ld.param.u32 	%r2, [addk_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd3, %rd1;
	mul.wide.s32 	%rd4, %r1, 4;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.u32 	%r6, [%rd5];
	add.s32 	%r7, %r6, KVAL;
	cvta.to.global.u64 	%rd6, %rd2;
	add.s64 	%rd7, %rd6, %rd4;
	st.global.u32 	[%rd7], %r7;

$L__BB0_2:
	ret;
}
)PTX";

static std::string make_ptx(uint32_t k) {
    std::string s = kPtxTemplate;
    size_t at = s.find("KVAL");
    s.replace(at, 4, std::to_string(k));
    // MT_LOAD_PTX_VERSION (e.g. 8.6) replaces the module's PTX version: gasan's error record
    // ends with a release fence from PTX 8.6 on and with a release exchange before it, so the
    // two forms can be compared on the same program.
    if (const char* v = getenv("MT_LOAD_PTX_VERSION")) {
        static const std::string kVersion = ".version 8.0";
        size_t vat = s.find(kVersion);
        if (vat != std::string::npos) s.replace(vat, kVersion.size(), ".version " + std::string(v));
    }
    return s;
}

__global__ void twicePlus(const uint32_t* in, uint32_t* out, int n, uint32_t k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2u * in[i] + k;
}

static const int kBlock = 256;
static const int kMaxElems = 64 << 10;
static const int kBadThread = 0, kBadRound = 3, kBadElems = 1000;  // the overflow mode's launch

static std::atomic<long> g_failures{0};
static std::mutex g_print;

static void fail(int thread, int round, const char* what, const char* err) {
    if (g_failures.fetch_add(1) < 20) {
        std::lock_guard<std::mutex> l(g_print);
        fprintf(stderr, "thread %d round %d: %s%s%s\n", thread, round, what, err ? ": " : "", err ? err : "");
    }
}
static bool ok_rt(int t, int r, const char* what, cudaError_t e) {
    if (e == cudaSuccess) return true;
    fail(t, r, what, cudaGetErrorString(e));
    return false;
}
static bool ok_drv(int t, int r, const char* what, CUresult e) {
    if (e == CUDA_SUCCESS) return true;
    const char* name = nullptr;
    if (cuGetErrorName(e, &name) != CUDA_SUCCESS || !name) name = "unknown CUresult";
    fail(t, r, what, name);
    return false;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Reads `out` back and compares element i with want(i); reports the first mismatch.
template <class Want>
static void check_out(int t, int r, const char* kernel, const uint32_t* d_out, int n, std::vector<uint32_t>& host, Want want) {
    host.assign(n, 0);
    if (!ok_rt(t, r, "cudaMemcpy read-back", cudaMemcpy(host.data(), d_out, n * sizeof(uint32_t), cudaMemcpyDeviceToHost))) return;
    for (int i = 0; i < n; i++) {
        if (host[i] != want(i)) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: element %d of %d reads %#x, want %#x", kernel, i, n, host[i], want(i));
            return fail(t, r, msg, nullptr);
        }
    }
}

static void worker(int t, int rounds, bool overflow, std::atomic<long>* modules) {
    // The runtime's primary context, current on this thread for the driver-API calls too.
    if (!ok_rt(t, -1, "cudaSetDevice", cudaSetDevice(0)) || !ok_rt(t, -1, "cudaFree(0)", cudaFree(0))) return;
    CUdevice dev;
    CUcontext ctx;
    if (!ok_drv(t, -1, "cuDeviceGet", cuDeviceGet(&dev, 0))) return;
    if (!ok_drv(t, -1, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev))) return;
    if (!ok_drv(t, -1, "cuCtxSetCurrent", cuCtxSetCurrent(ctx))) return;
    cudaStream_t stream;
    if (!ok_rt(t, -1, "cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking))) return;
    uint64_t rng = splitmix64(0x6d746c6f6164ull ^ ((uint64_t)(t + 1) << 40));
    std::vector<uint32_t> in_host, out_host;
    long loaded = 0;
    for (int r = 0; r < rounds; r++) {
        rng = splitmix64(rng);
        bool bad_round = t == kBadThread && r == kBadRound;
        int n = bad_round ? kBadElems : 1 + (int)(rng % kMaxElems);
        int launch_n = bad_round && overflow ? n + 1 : n;  // one element past the end of `out`
        uint32_t k = (uint32_t)t * (uint32_t)rounds + (uint32_t)r + 1;  // unique per thread and round
        uint32_t seed = (uint32_t)(rng >> 32);

        std::string ptx = make_ptx(k);
        CUmodule mod;
        if (!ok_drv(t, r, "cuModuleLoadData", cuModuleLoadData(&mod, ptx.c_str()))) continue;
        loaded++;
        CUfunction fn;
        uint32_t *d_in = nullptr, *d_out = nullptr;
        // `in` has one spare element, so the overflow round's only bad access is the write to `out`.
        if (ok_drv(t, r, "cuModuleGetFunction(addk)", cuModuleGetFunction(&fn, mod, "addk")) &&
            ok_rt(t, r, "cudaMalloc(in)", cudaMalloc((void**)&d_in, (n + 1) * sizeof(uint32_t))) &&
            ok_rt(t, r, "cudaMalloc(out)", cudaMalloc((void**)&d_out, n * sizeof(uint32_t)))) {
            in_host.resize(n + 1);
            for (int i = 0; i <= n; i++) in_host[i] = seed ^ ((uint32_t)i * 2654435761u);
            if (ok_rt(t, r, "cudaMemcpy(in)", cudaMemcpy(d_in, in_host.data(), (n + 1) * sizeof(uint32_t), cudaMemcpyHostToDevice))) {
                CUdeviceptr a = (CUdeviceptr)d_in, b = (CUdeviceptr)d_out;
                void* args[] = {&a, &b, &launch_n};
                unsigned grid = (unsigned)((launch_n + kBlock - 1) / kBlock);
                if (ok_drv(t, r, "cuLaunchKernel(addk)", cuLaunchKernel(fn, grid, 1, 1, kBlock, 1, 1, 0, (CUstream)stream, args, nullptr)) &&
                    ok_rt(t, r, "cudaStreamSynchronize after addk", cudaStreamSynchronize(stream)))
                    check_out(t, r, "addk", d_out, n, out_host, [&](int i) { return in_host[i] + k; });
                if (r % 2 == 1) {
                    uint32_t k2 = k ^ 0x5a5a5a5au;
                    twicePlus<<<(n + kBlock - 1) / kBlock, kBlock, 0, stream>>>(d_in, d_out, n, k2);
                    if (ok_rt(t, r, "twicePlus launch", cudaGetLastError()) &&
                        ok_rt(t, r, "cudaStreamSynchronize after twicePlus", cudaStreamSynchronize(stream)))
                        check_out(t, r, "twicePlus", d_out, n, out_host, [&](int i) { return 2u * in_host[i] + k2; });
                }
            }
        }
        if (d_in) ok_rt(t, r, "cudaFree(in)", cudaFree(d_in));
        if (d_out) ok_rt(t, r, "cudaFree(out)", cudaFree(d_out));
        ok_drv(t, r, "cuModuleUnload", cuModuleUnload(mod));
    }
    ok_rt(t, rounds, "cudaStreamDestroy", cudaStreamDestroy(stream));
    ok_drv(t, rounds, "cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease(dev));
    modules->fetch_add(loaded);
}

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--print-ptx")) {
        fputs(make_ptx(argc > 2 ? (uint32_t)strtoul(argv[2], nullptr, 0) : 1u).c_str(), stdout);
        return 0;
    }
    std::string mode = argc > 1 ? argv[1] : "clean";
    int threads = argc > 2 ? atoi(argv[2]) : 16;
    int rounds = argc > 3 ? atoi(argv[3]) : 50;
    if ((mode != "clean" && mode != "overflow") || threads < 1 || rounds < 1) {
        fprintf(stderr, "usage: mt_load [clean|overflow] [THREADS [ROUNDS]]\n");
        return 2;
    }
    if (mode == "overflow" && rounds <= kBadRound)
        fprintf(stderr, "mt_load: overflow needs ROUNDS > %d (the bad launch is thread %d's round %d)\n", kBadRound, kBadThread, kBadRound);
    cudaError_t e = cudaFree(0);  // create the context before the clock starts
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA init: %s\n", cudaGetErrorString(e));
        return 3;
    }
    std::atomic<long> modules{0};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) pool.emplace_back(worker, t, rounds, mode == "overflow", &modules);
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    long failures = g_failures.load();
    printf("BENCH mt_load threads=%d rounds=%d modules_per_s=%.0f modules=%ld seconds=%.3f failures=%ld\n", threads, rounds, modules.load() / s, modules.load(), s, failures);
    if (failures != 0) {
        printf("mt_load FAILED: %ld failed checks or calls\n", failures);
        return 4;
    }
    printf("result ok\n");
    return 0;
}
