// heap_read_after_free: a kernel frees a node it allocated with `new` and then reads a field of it
// again (the read sits after the delete).
// ./heap_read_after_free runs the buggy variant, ./heap_read_after_free clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

struct Node { float value; int next; float weight[6]; };

__global__ void k_node(float* out, bool late_read) {
    Node* node = new Node;
    if (!node) return;
    node->value = 2.0f * threadIdx.x;
    node->weight[5] = 1.5f;
    float v = node->value;
    if (!late_read) v += node->weight[5];
    delete node;
    if (late_read) v += node->weight[5];  // BUG:heap_read_after_free
    out[threadIdx.x] = v;
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* out = dmalloc<float>(64);
    k_node<<<1, 64>>>(out, !clean);
    SYNC();
    return done();
}
