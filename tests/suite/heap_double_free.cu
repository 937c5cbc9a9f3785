// heap_double_free: an error path frees a device-heap buffer and the common cleanup frees it again.
// ./heap_double_free runs the buggy variant, ./heap_double_free clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_parse(const int* in, int* status, bool forget_null) {
    char* buf = (char*)malloc(200);
    if (!buf) return;
    for (int i = 0; i < 200; ++i) buf[i] = (char)in[i];
    if (buf[0] == 0) {
        status[0] = -1;
        free(buf);
        if (!forget_null) buf = nullptr;
    }
    free(buf);  // BUG:heap_double_free
}

int main(int argc, char** argv) {
    parse_args(argc, argv);
    int* in = dmalloc<int>(N);   // zeroed: the error path runs
    int* status = dmalloc<int>(1);
    k_parse<<<1, 1>>>(in, status, !clean);
    SYNC();
    return done();
}
