// Hopper bulk copies (inline PTX), 128-bit accesses and a device function defined in another
// translation unit (built with -rdc=true).
#include <cstdint>
extern __device__ float combine(float a, float b);
__global__ void use_extern(float* o, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = combine(a[i], o[i]);
}
__global__ void bulk(float* g, int n) {
    __shared__ __align__(128) float s[256];
    __shared__ __align__(8) uint64_t bar;
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(s), ba = (uint32_t)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(ba));
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];" :: "r"(sa), "l"(g), "r"(ba) : "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(g + 256), "r"(sa), "r"(n) : "memory");
        asm volatile("cp.async.bulk.commit_group;");
        asm volatile("prefetch.global.L2 [%0];" :: "l"(g));
    }
}
__global__ void wide(ulonglong2* o, const ulonglong2* a) {
    unsigned __int128 v;
    asm volatile("ld.global.b128 %0, [%1];" : "=q"(v) : "l"(a + threadIdx.x));
    asm volatile("st.global.b128 [%0], %1;" :: "l"(o + threadIdx.x), "q"(v));
}
