// tag_gather_into_neighbour: an embedding gather whose host-computed row offsets use the row size in bytes, so one token's row is read from inside the next live table (tag mismatch, read).
// ./tag_gather_into_neighbour runs the buggy variant, ./tag_gather_into_neighbour clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

// Block t copies the D-float row starting at element off[t] of `table` to row t of `out`.
__global__ void k_embed(float* out, const float* table, const int* off, int D) {
    int t = blockIdx.x, d = threadIdx.x;
    if (d < D) out[t * D + d] = table[off[t] + d];  // BUG:tag_gather_into_neighbour
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    const int V = 256, D = 64, T = 8;
    float* table = dmalloc<float>(V * D);   // token embeddings, 64 KiB
    float* pos = dmalloc<float>(V * D);     // position embeddings, 64 KiB, right after
    float* out = dmalloc<float>(T * D);
    int* doff = dmalloc<int>(T);
    const int tok[T] = {3, 17, 42, 100, 8, 63, 0, 25};
    // Row offsets in elements, but the row length was taken in bytes (D * 4): ids below 64 silently
    // read a wrong row of `table`; id 100 reads 100 KiB past `table`, inside `pos` (which starts
    // 72 KiB past `table` under gasan, 64 KiB natively).
    int row = clean ? D : D * (int)sizeof(float);
    std::vector<int> off(T);
    for (int t = 0; t < T; t++) off[t] = tok[t] * row;
    CK(cudaMemcpy(doff, off.data(), T * sizeof(int), cudaMemcpyHostToDevice));
    k_embed<<<T, D>>>(out, table, doff, D);
    SYNC();
    CK(cudaFree(pos));
    return done();
}
