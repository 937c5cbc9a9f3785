// managed_overflow_read: a reduction over a cudaMallocManaged array reads one element past its end.
// ./managed_overflow_read runs the buggy variant, ./managed_overflow_read clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_sum(const double* v, int n, double* out) {
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += v[i];  // BUG:managed_overflow_read
    atomicAdd(out, s);
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    double *v, *out;
    CK(cudaMallocManaged(&v, 300 * sizeof(double)));
    CK(cudaMallocManaged(&out, sizeof(double)));
    for (int i = 0; i < 300; ++i) v[i] = 1.0;
    *out = 0;
    k_sum<<<1, 64>>>(v, clean ? 300 : 301, out);
    SYNC();
    return done();
}
