// visible_devices_overflow: the program runs itself again with CUDA_VISIBLE_DEVICES reordered (the
// GPUs in reverse, "0" with one GPU) and writes one past a buffer on what is then device 0, the
// last physical GPU (issue 40: reordering works; the report names the device as the program sees it).
// ./visible_devices_overflow runs the buggy variant, ./visible_devices_overflow clean the clean twin.
#include <string>
#include <unistd.h>
#include "common.h"

__global__ void k_visible_write(float* p, long idx) { if (threadIdx.x == 0) p[idx] = 5.0f; }  // BUG:visible_devices_overflow

int main(int argc, char** argv) {
    if (!getenv("SUITE_VISIBLE_REORDERED")) {
        // Count the GPUs with nvidia-smi-free means: a CUDA call here would fix the order too early.
        int nd = 0;
        for (;; nd++) {
            std::string dev = "/dev/nvidia" + std::to_string(nd);
            if (access(dev.c_str(), F_OK)) break;
        }
        std::string order;
        for (int i = (nd ? nd : 1) - 1; i >= 0; i--) order += std::to_string(i) + (i ? "," : "");
        setenv("CUDA_VISIBLE_DEVICES", order.c_str(), 1);
        setenv("SUITE_VISIBLE_REORDERED", "1", 1);
        printf("CUDA_VISIBLE_DEVICES=%s\n", order.c_str());
        fflush(stdout);
        execv("/proc/self/exe", argv);
        perror("execv");
        return 3;
    }
    parse_args(argc, argv);
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    CK(cudaSetDevice(0));
    float* p = dmalloc<float>(N);
    k_visible_write<<<1, 32>>>(p, clean ? N - 1 : N);
    SYNC();
    CK(cudaFree(p));
    printf("%d visible device(s)\n", nd);
    return done();
}
