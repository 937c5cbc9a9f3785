// Kernels for the cuLink verification program (link.cu), compiled to PTX twice: input A holds
// scaleA, input B holds writeAtB (LINK_B defined). Linked at run time by the application itself.
#ifndef LINK_B
extern "C" __global__ void scaleA(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * 2.0f + 1.0f;
}
#else
extern "C" __global__ void writeAtB(float* a, long i) {
    if (threadIdx.x == 0) a[i] = 42.0f;  // BUG when i is past the end
}
#endif
