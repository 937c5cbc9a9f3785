// invalid_free_host: cudaFree of a host (static) array.
// ./invalid_free_host runs the buggy variant, ./invalid_free_host clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

int main(int argc, char** argv) {
    parse_args(argc, argv);
    static float host[16];
    if (!clean) cudaFree(host);  // BUG:invalid_free_host
    return done();
}
