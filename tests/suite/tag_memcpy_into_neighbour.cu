// tag_memcpy_into_neighbour: the host assumes two cudaMalloc'd buffers are contiguous and copies the second one's bytes through a pointer past the end of the first.
// ./tag_memcpy_into_neighbour runs the buggy variant, ./tag_memcpy_into_neighbour clean the clean twin. Expectation: tests/expectations.json.
#include "common.h"

// A message is a header followed by its payload; the sender allocated them separately but the
// receiver copies "the payload" as header + header_bytes + skip.
int main(int argc, char** argv) {
    parse_args(argc, argv);
    const size_t header_bytes = 64 << 10, payload_bytes = 128 << 10;
    char* header = dmalloc<char>(header_bytes);
    char* payload = dmalloc<char>(payload_bytes);
    std::vector<char> host(8192);
    // 96 KiB past the header's start: under gasan inside the payload (past the header's redzone).
    const char* src = clean ? payload + 8192 : header + (96 << 10);
    CK(cudaMemcpy(host.data(), src, host.size(), cudaMemcpyDeviceToHost));  // BUG:tag_memcpy_into_neighbour
    SYNC();
    return done();
}
