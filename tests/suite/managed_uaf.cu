// managed_uaf: the host replaces a managed lookup table with a fresh copy and frees the old one, but
// the next kernel is still handed the old pointer.
// ./managed_uaf runs the buggy variant, ./managed_uaf clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_lookup(const int* table, const int* keys, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[keys[i] & 63];  // BUG:managed_uaf
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int n = 256;
    int *table, *keys, *out;
    CK(cudaMallocManaged(&table, 64 * sizeof(int)));
    CK(cudaMallocManaged(&keys, n * sizeof(int)));
    CK(cudaMallocManaged(&out, n * sizeof(int)));
    for (int i = 0; i < 64; i++) table[i] = 3 * i;
    for (int i = 0; i < n; i++) keys[i] = 7 * i;
    k_lookup<<<2, 128>>>(table, keys, out, n);
    SYNC();
    // A fresh table with the same contents; the old one goes (clean: only after its last use).
    int* fresh;
    CK(cudaMallocManaged(&fresh, 64 * sizeof(int)));
    memcpy(fresh, table, 64 * sizeof(int));
    if (!clean) CK(cudaFree(table));
    k_lookup<<<2, 128>>>(table, keys, out, n);
    SYNC();
    for (int i = 0; i < n; i++) if (out[i] != 3 * ((7 * i) & 63)) { printf("wrong result at %d\n", i); return 4; }
    if (clean) CK(cudaFree(table));
    CK(cudaFree(fresh));
    return done();
}
