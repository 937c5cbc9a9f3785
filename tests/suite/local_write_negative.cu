// local_write_negative: a per-thread running window written at (pos - 1) with pos 0 let through: a
// store one element before a thread-local array.
// ./local_write_negative runs the buggy variant, ./local_write_negative clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_local_window(const float* in, float* out, int start) {
    float win[8];
    for (int i = 0; i < 8; i++) win[i] = in[i];
    win[start - 1] = -1.0f;  // BUG:local_write_negative
    float s = 0;
    for (int i = 0; i < 8; i++) s += win[(i + start) & 7];
    out[threadIdx.x] = s;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* in = dmalloc<float>(8);
    float* out = dmalloc<float>(32);
    k_local_window<<<1, 32>>>(in, out, clean ? 1 : 0);
    SYNC();
    return done();
}
