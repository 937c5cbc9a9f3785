// Many host threads allocating at once (issue 12, part 4): THREADS threads (default 64) each make
// OPS cudaMalloc calls (default 10000), freeing as they go (at most 8 buffers live per thread),
// with sizes from 1 byte to 4 MiB (3 in 100 above 256 KiB: gasan's large allocations). One buffer
// in four gets a per-thread pattern (cudaMemset of the whole buffer, cudaMemcpy of a tagged head
// and tail) that is read back and checked just before its cudaFree: a buffer handed to two threads,
// or moved, loses it. Prints "BENCH mt_alloc threads=T ops=N ops_per_s=R" (N counts cudaMalloc and
// cudaFree calls) and "result ok", and exits 0, only if every call succeeded and every pattern
// came back; otherwise it prints what failed and exits 4.
//   usage: mt_alloc [THREADS [OPS]]
// Built by runtime/gpu/build.sh with the pinned nvcc.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

static const size_t kSmallMax = 256 << 10;  // gasan's SMALL_MAX
static const size_t kTagBytes = 64;         // head and tail written with cudaMemcpy
static const int kMaxLive = 8;

static std::atomic<long> g_failures{0};
static std::mutex g_print;

static void fail(int thread, const char* what, long op, cudaError_t e) {
    if (g_failures.fetch_add(1) < 20) {
        std::lock_guard<std::mutex> l(g_print);
        fprintf(stderr, "thread %d op %ld: %s%s%s\n", thread, op, what, e == cudaSuccess ? "" : ": ", e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static size_t pick_size(uint64_t r) {
    uint64_t k = r % 100, v = r >> 8;
    if (k < 75) return 1 + v % 4096;
    if (k < 97) return 1 + v % kSmallMax;
    return kSmallMax + 1 + v % ((4 << 20) - kSmallMax);
}

struct Buf {
    unsigned char* p;
    size_t size;
    bool tagged;
    unsigned char fill;  // byte cudaMemset wrote
    uint64_t tag;        // seeds the head and tail bytes
};

static void tag_bytes(uint64_t tag, unsigned char* out, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = splitmix64(tag + i);
        memcpy(out + i, &w, n - i < 8 ? n - i : 8);
    }
}

// Writes the buffer's pattern: every byte `fill`, then the tagged head and tail.
static bool write_pattern(int t, long op, const Buf& b) {
    cudaError_t e = cudaMemset(b.p, b.fill, b.size);
    if (e != cudaSuccess) return fail(t, "cudaMemset", op, e), false;
    unsigned char tag[2 * kTagBytes];
    tag_bytes(b.tag, tag, sizeof tag);
    size_t head = b.size < kTagBytes ? b.size : kTagBytes;
    if ((e = cudaMemcpy(b.p, tag, head, cudaMemcpyHostToDevice)) != cudaSuccess) return fail(t, "cudaMemcpy head", op, e), false;
    if (b.size >= 2 * kTagBytes) {
        if ((e = cudaMemcpy(b.p + b.size - kTagBytes, tag + kTagBytes, kTagBytes, cudaMemcpyHostToDevice)) != cudaSuccess) return fail(t, "cudaMemcpy tail", op, e), false;
    }
    return true;
}

// Reads back the first and last (up to) 4 KiB and checks them against the pattern.
static void check_pattern(int t, long op, const Buf& b, std::vector<unsigned char>& host) {
    unsigned char tag[2 * kTagBytes];
    tag_bytes(b.tag, tag, sizeof tag);
    const size_t window = 4096;
    size_t spans[2][2] = {{0, b.size < window ? b.size : window}, {b.size > window ? b.size - window : 0, b.size}};
    for (auto& s : spans) {
        size_t n = s[1] - s[0];
        host.assign(n, 0);
        cudaError_t e = cudaMemcpy(host.data(), b.p + s[0], n, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) return fail(t, "cudaMemcpy read-back", op, e);
        for (size_t i = 0; i < n; i++) {
            size_t at = s[0] + i;
            unsigned char want = b.fill;
            if (at < kTagBytes) want = tag[at];
            else if (b.size >= 2 * kTagBytes && at >= b.size - kTagBytes) want = tag[kTagBytes + at - (b.size - kTagBytes)];
            if (host[i] != want) {
                char msg[160];
                snprintf(msg, sizeof msg, "buffer %p+%zu byte %zu reads %#x, wrote %#x", (void*)b.p, b.size, at, host[i], want);
                return fail(t, msg, op, cudaSuccess);
            }
        }
    }
}

static void worker(int t, long ops, std::atomic<long>* calls) {
    uint64_t rng = splitmix64(0x6a5a0012ull ^ ((uint64_t)(t + 1) << 40));
    auto next = [&] { return rng = splitmix64(rng); };
    std::vector<Buf> live;
    std::vector<unsigned char> host;
    long n = 0;
    auto release = [&](const Buf& b, long op) {
        if (b.tagged) check_pattern(t, op, b, host);
        cudaError_t e = cudaFree(b.p);
        if (e != cudaSuccess) fail(t, "cudaFree", op, e);
        n++;
    };
    for (long i = 0; i < ops; i++) {
        while ((int)live.size() >= kMaxLive || (!live.empty() && next() % 2 == 0)) {
            size_t k = next() % live.size();
            Buf b = live[k];
            live[k] = live.back();
            live.pop_back();
            release(b, i);
        }
        Buf b{nullptr, pick_size(next()), next() % 4 == 0, (unsigned char)(1 + next() % 255), ((uint64_t)t << 48) ^ (uint64_t)i};
        cudaError_t e = cudaMalloc((void**)&b.p, b.size);
        n++;
        if (e != cudaSuccess) {
            char msg[64];
            snprintf(msg, sizeof msg, "cudaMalloc(%zu)", b.size);
            fail(t, msg, i, e);
            continue;
        }
        if (b.tagged && !write_pattern(t, i, b)) b.tagged = false;
        live.push_back(b);
    }
    for (auto& b : live) release(b, ops);
    calls->fetch_add(n);
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 64;
    long ops = argc > 2 ? atol(argv[2]) : 10000;
    if (threads < 1 || ops < 1) {
        fprintf(stderr, "usage: mt_alloc [THREADS [OPS]]\n");
        return 2;
    }
    cudaError_t e = cudaFree(0);  // create the context before the clock starts
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA init: %s\n", cudaGetErrorString(e));
        return 3;
    }
    std::atomic<long> calls{0};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) pool.emplace_back(worker, t, ops, &calls);
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    long failures = g_failures.load();
    printf("BENCH mt_alloc threads=%d ops=%ld ops_per_s=%.0f seconds=%.3f failures=%ld\n", threads, calls.load(), calls.load() / s, s, failures);
    if (failures != 0) {
        printf("mt_alloc FAILED: %ld failed checks or calls\n", failures);
        return 4;
    }
    printf("result ok\n");
    return 0;
}
