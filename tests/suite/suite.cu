// gasan detection suite: every case is a small kernel program with one planted bug (marked
// `// BUG:<case>`) and a clean twin (same code, in-bounds parameters), selected on the command line:
//   suite CASE [clean]
// Clean runs print "result ok". Expectations: tests/expectations.json.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %d (%s) at %s:%d\n", (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); exit(3); } } while (0)
#define SYNC() CK(cudaDeviceSynchronize())

static bool clean = false;
template <class T> static T* dmalloc(size_t n) { T* p; CK(cudaMalloc(&p, n * sizeof(T))); CK(cudaMemset(p, 0, n * sizeof(T))); return p; }

// ---- kernels ----
__global__ void k_write(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }  // BUG:ovf_write_adjacent BUG:ovf_write_far_live BUG:streamed_overflow
__global__ void k_read(float* o, const float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i % 32] += p[i]; }  // BUG:ovf_read_adjacent
__global__ void k_atomic(int* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(&p[i], 1); }  // BUG:ovf_atomic_adjacent BUG:uaf_atomic
__global__ void k_vec_read(float4* o, const float4* p, int n) { int i = threadIdx.x; if (i < n) o[0].x += p[i].y; }  // BUG:ovf_vector_read
__global__ void k_vec_write(float4* p, int n) { int i = threadIdx.x; if (i < n) p[i] = make_float4(1, 2, 3, 4); }  // BUG:ovf_vector_write
__global__ void k_double(double* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 2.0; }  // BUG:ovf_double_write
__global__ void k_bytes(unsigned char* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 7; }  // BUG:tail_1_past_100 BUG:tail_1_past_257
__global__ void k_int_at(int* p, long idx) { if (threadIdx.x == 0) p[idx] = 5; }  // BUG:tail_4_past_100 BUG:underflow_write BUG:far_write_64k BUG:large_far_write
__global__ void k_read_at(float* o, const float* p, long idx) { if (threadIdx.x == 0) o[0] = p[idx]; }  // BUG:underflow_read BUG:far_read_1mib BUG:uaf_read_immediate BUG:uaf_large
__global__ void k_write_at(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 9.0f; }  // BUG:uaf_write_immediate BUG:uaf_after_1000_allocs BUG:async_uaf
__global__ void k_reduce(float* out, const float* in, int n, int inclusive) {
    float s = 0;
    for (int i = 0; i < n + inclusive; i++) s += in[i];  // BUG:loop_overrun
    *out = s;
}
__global__ void k_stencil(float* o, const float* in, int w, int h, int y0) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y + y0;
    if (x > 0 && x < w - 1 && y < h - 1) o[y * w + x] = in[(y - 1) * w + x] + in[(y + 1) * w + x];  // BUG:stencil_halo
}
__global__ void k_transpose(float* o, const float* in, int w, int h, int ow) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) o[x * ow + y] = in[y * w + x];  // BUG:transpose_wrong_dim
}
__global__ void k_gather(float* o, const float* in, const int* idx, int n) { int i = threadIdx.x; if (i < n) o[i] = in[idx[i]]; }  // BUG:gather_bad_index
__global__ void k_scatter(float* o, const float* in, const int* idx, int n) { int i = threadIdx.x; if (i < n) o[idx[i]] = in[i]; }  // BUG:scatter_bad_index
__global__ void k_histo(unsigned* h, const int* x, int n, int bins) { int i = threadIdx.x; if (i < n) atomicAdd(&h[x[i] % bins], 1u); }  // BUG:histogram_bad_bin
__device__ __noinline__ void store(float* p, int i) { p[i] = 3.0f; }  // BUG:device_fn_overflow
__global__ void k_devfn(float* p, int n) { int i = threadIdx.x; if (i < n) store(p, i); }
__global__ void k_pred(float* p, const int* flags, int n) { int i = threadIdx.x; if (flags[i % 32] && i <= n) p[i] = 4.0f; }  // BUG:predicated_overflow
__global__ void k_stage1(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] = i; }
__global__ void k_stage2(float* b, const float* a, int n, int extra) { int i = threadIdx.x; if (i < n + extra) b[i] = a[i % n] * 2; }  // BUG:pipeline_second_kernel
__global__ void k_pitch(float* p, size_t pitch, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) *(float*)((char*)p + y * pitch + x * 4) = 1.0f;  // BUG:pitch_overflow
}
__global__ void k_mgpu(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 6.0f; }  // BUG:mgpu_overflow BUG:mgpu_uaf
__global__ void k_shared_static(float* o, int idx) { __shared__ float s[64]; s[threadIdx.x] = 1; __syncthreads(); if (threadIdx.x == 0) { s[idx] = 2; o[0] = s[0]; } }  // BUG:shared_static_overflow
__global__ void k_shared_dynamic(float* o, int idx) { extern __shared__ float d[]; d[threadIdx.x] = 1; __syncthreads(); if (threadIdx.x == 0) { d[idx] = 2; o[0] = d[0]; } }  // BUG:shared_dynamic_overflow
__global__ void k_local(float* o, int idx) { float l[16]; for (int i = 0; i < 16; i++) l[i] = o[i]; l[idx] = 1; o[0] = l[(idx + 3) & 15]; }  // BUG:local_overflow
__global__ void k_scope(float* o, int use_after) {
    float* p;
    { float inner[8]; for (int i = 0; i < 8; i++) inner[i] = i; p = inner; if (!use_after) o[0] = p[3]; }
    if (use_after) o[0] = p[3];  // BUG:use_after_scope
}
__global__ void k_dev_malloc(int n) { int* p = (int*)malloc(16 * sizeof(int)); if (p) { p[n] = 1; free(p); } }  // BUG:device_malloc_overflow
__global__ void k_managed(float* p, int n) { int i = threadIdx.x; if (i < n) p[i] = 1.0f; }  // BUG:managed_overflow

// ---- cases: the buggy variant unless `clean` ----
static const int N = 1000;
static int c_ovf_write_adjacent() { float* p = dmalloc<float>(N); k_write<<<4, 256>>>(p, clean ? N : N + 1); SYNC(); return 0; }
static int c_ovf_read_adjacent() { float *p = dmalloc<float>(N), *o = dmalloc<float>(32); k_read<<<4, 256>>>(o, p, clean ? N : N + 1); SYNC(); return 0; }
static int c_ovf_atomic_adjacent() { int* p = dmalloc<int>(N); k_atomic<<<4, 256>>>(p, clean ? N : N + 2); SYNC(); return 0; }
static int c_ovf_vector_read() { float4 *p = dmalloc<float4>(100), *o = dmalloc<float4>(1); k_vec_read<<<1, 128>>>(o, p, clean ? 100 : 101); SYNC(); return 0; }
static int c_ovf_vector_write() { float4* p = dmalloc<float4>(100); k_vec_write<<<1, 128>>>(p, clean ? 100 : 101); SYNC(); return 0; }
static int c_ovf_double_write() { double* p = dmalloc<double>(100); k_double<<<1, 128>>>(p, clean ? 100 : 101); SYNC(); return 0; }
static int c_tail_1_past_100() { unsigned char* p = dmalloc<unsigned char>(100); k_bytes<<<1, 128>>>(p, clean ? 100 : 101); SYNC(); return 0; }
static int c_tail_1_past_257() { unsigned char* p = dmalloc<unsigned char>(257); k_bytes<<<1, 512>>>(p, clean ? 257 : 258); SYNC(); return 0; }
static int c_tail_4_past_100() { int* p = dmalloc<int>(25); k_int_at<<<1, 32>>>(p, clean ? 24 : 25); SYNC(); return 0; }
static int c_underflow_read() { float *a = dmalloc<float>(N), *p = dmalloc<float>(N), *o = dmalloc<float>(1); (void)a; k_read_at<<<1, 32>>>(o, p, clean ? 0 : -1); SYNC(); return 0; }
static int c_underflow_write() { int *a = dmalloc<int>(N), *p = dmalloc<int>(N); (void)a; k_int_at<<<1, 32>>>(p, clean ? 0 : -16); SYNC(); return 0; }
static int c_ovf_write_far_live() {  // lands inside another live buffer: invisible to redzones
    float *a = dmalloc<float>(N), *b = dmalloc<float>(N);
    long off = (b - a) + 10;
    k_write<<<1, 32>>>(clean ? b : a + off - 10, 1);
    SYNC(); return 0;
}
static int c_far_write_64k() { int* p = dmalloc<int>(N); k_int_at<<<1, 32>>>(p, clean ? 5 : 16384 + N); SYNC(); return 0; }
static int c_far_read_1mib() { float *p = dmalloc<float>(N), *o = dmalloc<float>(1); k_read_at<<<1, 32>>>(o, p, clean ? 5 : (1 << 18) + N); SYNC(); return 0; }
static int c_large_far_write() { int* p = dmalloc<int>(1 << 20); k_int_at<<<1, 32>>>(p, clean ? 5 : (1 << 20) + 16384); SYNC(); return 0; }
static int c_loop_overrun() { float *p = dmalloc<float>(N), *o = dmalloc<float>(1); k_reduce<<<1, 1>>>(o, p, N, clean ? 0 : 1); SYNC(); return 0; }
static int c_stencil_halo() { int w = 64, h = 64; float *a = dmalloc<float>(w * h), *b = dmalloc<float>(w * h); k_stencil<<<dim3(1, h - 1), 64>>>(b, a, w, h, clean ? 1 : 0); SYNC(); return 0; }
static int c_transpose_wrong_dim() { int w = 64, h = 32; float *a = dmalloc<float>(w * h), *b = dmalloc<float>(w * h); k_transpose<<<dim3(2, 1), dim3(32, 32)>>>(b, a, w, h, clean ? h : w); SYNC(); return 0; }
static int c_gather_bad_index() {
    std::vector<int> idx(64); for (int i = 0; i < 64; i++) idx[i] = i; if (!clean) idx[63] = 64;
    float *in = dmalloc<float>(64), *o = dmalloc<float>(64); int* di = dmalloc<int>(64);
    CK(cudaMemcpy(di, idx.data(), 256, cudaMemcpyHostToDevice)); k_gather<<<1, 64>>>(o, in, di, 64); SYNC(); return 0;
}
static int c_scatter_bad_index() {
    std::vector<int> idx(64); for (int i = 0; i < 64; i++) idx[i] = 63 - i; if (!clean) idx[0] = 70;
    float *in = dmalloc<float>(64), *o = dmalloc<float>(64); int* di = dmalloc<int>(64);
    CK(cudaMemcpy(di, idx.data(), 256, cudaMemcpyHostToDevice)); k_scatter<<<1, 64>>>(o, in, di, 64); SYNC(); return 0;
}
static int c_histogram_bad_bin() {
    std::vector<int> x(64); for (int i = 0; i < 64; i++) x[i] = i * 5;
    int* dx = dmalloc<int>(64); unsigned* h = dmalloc<unsigned>(256);
    CK(cudaMemcpy(dx, x.data(), 256, cudaMemcpyHostToDevice)); k_histo<<<1, 64>>>(h, dx, 64, clean ? 256 : 320); SYNC(); return 0;
}
static int c_uaf_read_immediate() { float *p = dmalloc<float>(N), *o = dmalloc<float>(1); CK(cudaFree(p)); if (clean) p = dmalloc<float>(N); k_read_at<<<1, 32>>>(o, p, 10); SYNC(); return 0; }
static int c_uaf_write_immediate() { float* p = dmalloc<float>(N); CK(cudaFree(p)); if (clean) p = dmalloc<float>(N); k_write_at<<<1, 32>>>(p, 10); SYNC(); return 0; }
static int c_uaf_after_1000_allocs() {
    float* p = dmalloc<float>(N); CK(cudaFree(p));
    std::vector<float*> v; for (int i = 0; i < 1000; i++) v.push_back(dmalloc<float>(N));
    if (clean) p = v[500];
    k_write_at<<<1, 32>>>(p, 10); SYNC(); for (float* q : v) CK(cudaFree(q)); return 0;
}
static int c_uaf_atomic() { int* p = dmalloc<int>(N); CK(cudaFree(p)); if (clean) p = dmalloc<int>(N); k_atomic<<<1, 32>>>(p, 32); SYNC(); return 0; }
static int c_uaf_large() { float *p = dmalloc<float>(4 << 20), *o = dmalloc<float>(1); CK(cudaFree(p)); if (clean) p = dmalloc<float>(4 << 20); k_read_at<<<1, 32>>>(o, p, 1000); SYNC(); return 0; }
static int c_double_free() { float* p = dmalloc<float>(N); CK(cudaFree(p)); if (!clean) cudaFree(p); CK(cudaDeviceSynchronize()); return 0; }  // BUG:double_free
static int c_double_free_large() { float* p = dmalloc<float>(4 << 20); CK(cudaFree(p)); if (!clean) cudaFree(p); CK(cudaDeviceSynchronize()); return 0; }  // BUG:double_free_large
static int c_invalid_free_offset() { float* p = dmalloc<float>(N); cudaError_t e = cudaFree(clean ? p : p + 4); (void)e; return 0; }  // BUG:invalid_free_offset
static int c_invalid_free_host() { static float host[16]; if (!clean) cudaFree(host); return 0; }  // BUG:invalid_free_host
static int c_memcpy_h2d_overflow() { std::vector<float> h(N + 64); float* p = dmalloc<float>(N); CK(cudaMemcpy(p, h.data(), (clean ? N : N + 64) * 4, cudaMemcpyHostToDevice)); return 0; }  // BUG:memcpy_h2d_overflow
static int c_memcpy_d2h_overflow() { std::vector<float> h(N + 64); float* p = dmalloc<float>(N); CK(cudaMemcpy(h.data(), p, (clean ? N : N + 64) * 4, cudaMemcpyDeviceToHost)); return 0; }  // BUG:memcpy_d2h_overflow
static int c_memcpy_d2d_overflow() { float *a = dmalloc<float>(N), *b = dmalloc<float>(2 * N); CK(cudaMemcpy(a, b, (clean ? N : N + 100) * 4, cudaMemcpyDeviceToDevice)); SYNC(); return 0; }  // BUG:memcpy_d2d_overflow
static int c_memset_overflow() { float* p = dmalloc<float>(N); CK(cudaMemset(p, 0, (clean ? N : N + 8) * 4)); SYNC(); return 0; }  // BUG:memset_overflow
static int c_memcpy_after_free() { std::vector<float> h(N); float* p = dmalloc<float>(N); CK(cudaFree(p)); if (clean) p = dmalloc<float>(N); CK(cudaMemcpy(h.data(), p, N * 4, cudaMemcpyDeviceToHost)); return 0; }  // BUG:memcpy_after_free
static int c_async_uaf() {
    cudaStream_t s; CK(cudaStreamCreate(&s)); float* p; CK(cudaMallocAsync(&p, N * 4, s));
    if (!clean) CK(cudaFreeAsync(p, s));
    k_write_at<<<1, 32, 0, s>>>(p, 10);
    if (clean) CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s)); return 0;
}
static int c_async_memcpy_overflow() {
    cudaStream_t s; CK(cudaStreamCreate(&s)); std::vector<float> h(N + 32); float* p; CK(cudaMallocAsync(&p, N * 4, s));
    CK(cudaMemcpyAsync(p, h.data(), (clean ? N : N + 32) * 4, cudaMemcpyHostToDevice, s)); CK(cudaStreamSynchronize(s)); return 0;  // BUG:async_memcpy_overflow
}
static int c_pitch_overflow() { float* p; size_t pitch; CK(cudaMallocPitch(&p, &pitch, 100 * 4, 50)); k_pitch<<<clean ? 50 : 51, 128>>>(p, pitch, 100, 51); SYNC(); return 0; }
static int c_device_fn_overflow() { float* p = dmalloc<float>(100); k_devfn<<<1, 128>>>(p, clean ? 100 : 101); SYNC(); return 0; }
static int c_predicated_overflow() { float* p = dmalloc<float>(64); int* f = dmalloc<int>(32); CK(cudaMemset(f, 1, 128)); k_pred<<<1, 128>>>(p, f, clean ? 63 : 64); SYNC(); return 0; }
static int c_pipeline_second_kernel() { float *a = dmalloc<float>(100), *b = dmalloc<float>(100); k_stage1<<<1, 128>>>(a, 100); k_stage2<<<1, 128>>>(b, a, 100, clean ? 0 : 1); SYNC(); return 0; }
static int c_streamed_overflow() { cudaStream_t s; CK(cudaStreamCreate(&s)); float* p = dmalloc<float>(N); k_write<<<4, 256, 0, s>>>(p, clean ? N : N + 1); CK(cudaStreamSynchronize(s)); return 0; }
static int c_shared_static_overflow() { float* o = dmalloc<float>(1); k_shared_static<<<1, 64>>>(o, clean ? 63 : 64); SYNC(); return 0; }
static int c_shared_dynamic_overflow() { float* o = dmalloc<float>(1); k_shared_dynamic<<<1, 64, 64 * 4>>>(o, clean ? 63 : 64); SYNC(); return 0; }
static int c_local_overflow() { float* o = dmalloc<float>(16); k_local<<<1, 1>>>(o, clean ? 15 : 16); SYNC(); return 0; }
static int c_use_after_scope() { float* o = dmalloc<float>(1); k_scope<<<1, 1>>>(o, clean ? 0 : 1); SYNC(); return 0; }
static int c_device_malloc_overflow() { k_dev_malloc<<<1, 1>>>(clean ? 15 : 16); SYNC(); return 0; }
static int c_managed_overflow() { float* p; CK(cudaMallocManaged(&p, 100 * 4)); k_managed<<<1, 128>>>(p, clean ? 100 : 101); SYNC(); return 0; }

// Multi-GPU-safe: with a second GPU, it gets its own buffer and kernel first (its memory is not
// gasan's); the bug is on device 0. With one GPU they are plain single-GPU bugs.
static void other_device_work() {
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < 2) return;
    CK(cudaSetDevice(1));
    float* q = dmalloc<float>(N);
    k_write<<<4, 256>>>(q, N);
    SYNC();
    CK(cudaFree(q));
    CK(cudaSetDevice(0));
}
static int c_mgpu_overflow() { CK(cudaSetDevice(0)); float* p = dmalloc<float>(N); other_device_work(); k_mgpu<<<1, 32>>>(p, clean ? N - 1 : N); SYNC(); return 0; }
static int c_mgpu_uaf() { CK(cudaSetDevice(0)); float* p = dmalloc<float>(N); other_device_work(); if (!clean) CK(cudaFree(p)); k_mgpu<<<1, 32>>>(p, 0); SYNC(); return 0; }

struct Case { const char* name; int (*fn)(); };
#define C(n) {#n, c_##n}
static const Case cases[] = {
    C(ovf_write_adjacent), C(ovf_read_adjacent), C(ovf_atomic_adjacent), C(ovf_vector_read), C(ovf_vector_write),
    C(ovf_double_write), C(tail_1_past_100), C(tail_1_past_257), C(tail_4_past_100), C(underflow_read), C(underflow_write),
    C(ovf_write_far_live), C(far_write_64k), C(far_read_1mib), C(large_far_write), C(loop_overrun), C(stencil_halo),
    C(transpose_wrong_dim), C(gather_bad_index), C(scatter_bad_index), C(histogram_bad_bin), C(uaf_read_immediate),
    C(uaf_write_immediate), C(uaf_after_1000_allocs), C(uaf_atomic), C(uaf_large), C(double_free), C(double_free_large),
    C(invalid_free_offset), C(invalid_free_host), C(memcpy_h2d_overflow), C(memcpy_d2h_overflow), C(memcpy_d2d_overflow),
    C(memset_overflow), C(memcpy_after_free), C(async_uaf), C(async_memcpy_overflow), C(pitch_overflow),
    C(device_fn_overflow), C(predicated_overflow), C(pipeline_second_kernel), C(streamed_overflow),
    C(shared_static_overflow), C(shared_dynamic_overflow), C(local_overflow), C(use_after_scope),
    C(device_malloc_overflow), C(managed_overflow), C(mgpu_overflow), C(mgpu_uaf),
};

int main(int argc, char** argv) {
    if (argc >= 2 && !strcmp(argv[1], "--list")) { for (auto& c : cases) printf("%s\n", c.name); return 0; }
    if (argc < 2) { fprintf(stderr, "usage: %s CASE [clean] | --list\n", argv[0]); return 2; }
    clean = argc >= 3 && !strcmp(argv[2], "clean");
    for (auto& c : cases) if (!strcmp(c.name, argv[1])) { int r = c.fn(); if (r == 0) printf("result ok\n"); return r; }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
