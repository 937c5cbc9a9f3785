// shared_dynamic_read_past: a block reduction over dynamic shared memory sized by the launch; the
// buggy launch passes room for 224 of the block's 256 threads (896 bytes, a multiple of 128, so no
// rounding of the dynamic size can hide it), so the last 32 threads read past the dynamic size.
// ./shared_dynamic_read_past runs the buggy variant, ./shared_dynamic_read_past clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_dyn_reduce(const float* in, float* out, int elems) {
    extern __shared__ float buf[];
    int t = threadIdx.x;
    if (t < elems) buf[t] = in[t];
    __syncthreads();
    float v = buf[t];  // BUG:shared_dynamic_read_past
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if ((t & 31) == 0) atomicAdd(out, v);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(256);
    float* out = dmalloc<float>(1);
    int elems = clean ? 256 : 224;
    k_dyn_reduce<<<1, 256, elems * sizeof(float)>>>(in, out, elems);
    SYNC();
    return done();
}
