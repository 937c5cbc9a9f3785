// Shared helpers of the detection-suite programs. Every tests/suite/<case>.cu is one standalone
// program with one planted bug, marked `// BUG:<case>` on its source line, and a clean twin (the
// same code with in-bounds parameters):
//   ./<case>          runs the buggy variant
//   ./<case> clean    runs the clean twin
// Both print "result ok" when they reach their end. Expectations: tests/expectations.json.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %d (%s) at %s:%d\n", (int)e_, cudaGetErrorString(e_), __FILE__, __LINE__); exit(3); } } while (0)
#define SYNC() CK(cudaDeviceSynchronize())

static bool clean = false;   // true for the clean twin
static const int N = 1000;   // the default element count

template <class T> static T* dmalloc(size_t n) { T* p; CK(cudaMalloc(&p, n * sizeof(T))); CK(cudaMemset(p, 0, n * sizeof(T))); return p; }

// No argument: the buggy variant; `clean`: the clean twin.
static void parse_args(int argc, char** argv) {
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "clean"))) { fprintf(stderr, "usage: %s [clean]\n", argv[0]); exit(2); }
    clean = argc == 2;
}

// The program reached its end.
static int done() { printf("result ok\n"); return 0; }
