// use_after_scope: a read through a pointer to a local array after its scope ended.
// ./use_after_scope runs the buggy variant, ./use_after_scope clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_scope(float* o, int use_after) {
    float* p;
    { float inner[8]; for (int i = 0; i < 8; i++) inner[i] = i; p = inner; if (!use_after) o[0] = p[3]; }
    if (use_after) o[0] = p[3];  // BUG:use_after_scope
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    float* o = dmalloc<float>(1);
    k_scope<<<1, 1>>>(o, clean ? 0 : 1);
    SYNC();
    return done();
}
