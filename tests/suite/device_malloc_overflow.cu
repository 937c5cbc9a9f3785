// device_malloc_overflow: a store one past a device-heap (in-kernel malloc) allocation.
// ./device_malloc_overflow runs the buggy variant, ./device_malloc_overflow clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

__global__ void k_dev_malloc(int n) { int* p = (int*)malloc(16 * sizeof(int)); if (p) { p[n] = 1; free(p); } }  // BUG:device_malloc_overflow

int main(int argc, char** argv) {
    parse_args(argc, argv);
    k_dev_malloc<<<1, 1>>>(clean ? 15 : 16);
    SYNC();
    return done();
}
