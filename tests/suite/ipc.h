// Shared by the IPC suite programs (issue 40): a producer process allocates N floats, exports them
// with cudaIpcGetMemHandle and hands the 64-byte handle to a consumer, a second process running the
// same program (`--consumer [clean]`, started before the producer touches CUDA), which opens it
// with cudaIpcOpenMemHandle on its device and runs the case's kernel on the imported buffer. The
// producer keeps the buffer until the consumer exits, and exits with the consumer's status.
#pragma once
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"

extern char** environ;

// The case's kernel launch: read imported[idx] into out[0] on the current device.
typedef void (*ipc_read_fn)(const float* imported, long idx, float* out);

static int ipc_consumer(int device, ipc_read_fn read) {
    cudaIpcMemHandle_t h;
    size_t got = 0;
    while (got < sizeof h) {
        ssize_t r = ::read(0, (char*)&h + got, sizeof h - got);
        if (r <= 0) { fprintf(stderr, "consumer: no handle from the producer\n"); return 3; }
        got += (size_t)r;
    }
    CK(cudaSetDevice(device));
    void* p = nullptr;
    CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    float* out = dmalloc<float>(1);
    read((const float*)p, clean ? N - 1 : N, out);
    SYNC();
    float v = 0;
    CK(cudaMemcpy(&v, out, sizeof v, cudaMemcpyDeviceToHost));
    printf("consumer (device %d) read %g\n", device, v);
    CK(cudaFree(out));
    CK(cudaIpcCloseMemHandle(p));
    return 0;
}

// needs_gpus: 2 for a consumer on device 1 (the producer stays on device 0).
static int ipc_main(int argc, char** argv, int needs_gpus, ipc_read_fn read) {
    if (argc >= 2 && !strcmp(argv[1], "--consumer")) {
        clean = argc == 3 && !strcmp(argv[2], "clean");
        return ipc_consumer(needs_gpus - 1, read);
    }
    parse_args(argc, argv);
    int fds[2];
    if (pipe(fds)) { perror("pipe"); return 3; }
    // The consumer starts before this process initialises CUDA (no fork of a CUDA process).
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    char consumer[] = "--consumer", cl[] = "clean";
    char* args[] = {argv[0], consumer, clean ? cl : nullptr, nullptr};
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, args, environ)) { perror("posix_spawn"); return 3; }
    close(fds[0]);
    int nd = 0;
    CK(cudaGetDeviceCount(&nd));
    if (nd < needs_gpus) {
        close(fds[1]);
        waitpid(pid, nullptr, 0);
        printf("SKIPPED: needs %d GPUs, this machine has %d\n", needs_gpus, nd);
        return 77;
    }
    CK(cudaSetDevice(0));
    float* buf = dmalloc<float>(N);
    std::vector<float> h(N);
    for (int i = 0; i < N; i++) h[i] = (float)i;
    CK(cudaMemcpy(buf, h.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    cudaIpcMemHandle_t handle;
    CK(cudaIpcGetMemHandle(&handle, buf));
    if (write(fds[1], &handle, sizeof handle) != (ssize_t)sizeof handle) { perror("write"); return 3; }
    close(fds[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    CK(cudaFree(buf));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "producer: the consumer ended with status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
    }
    return done();
}
