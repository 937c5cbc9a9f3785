// uaf_after_1000_allocs: a kernel writes a buffer freed before 1000 further allocations (use after free, write).
// ./uaf_after_1000_allocs runs the buggy variant, ./uaf_after_1000_allocs clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_write_at(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 9.0f; }  // BUG:uaf_after_1000_allocs

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* p = dmalloc<float>(N);
    CK(cudaFree(p));
    std::vector<float*> v;
    for (int i = 0; i < 1000; i++) v.push_back(dmalloc<float>(N));
    if (clean) p = v[500];
    k_write_at<<<1, 32>>>(p, 10);
    SYNC();
    for (float* q : v) CK(cudaFree(q));
    return done();
}
