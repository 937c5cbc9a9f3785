// Stencils, templates, predicated code and vector types.
template <typename T, int R>
__global__ void stencil1d(T* out, const T* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < R || i >= n - R) return;
    T acc = 0;
    #pragma unroll
    for (int k = -R; k <= R; k++) acc += in[i + k];
    out[i] = acc;
}
template __global__ void stencil1d<float, 2>(float*, const float*, int);
template __global__ void stencil1d<double, 3>(double*, const double*, int);
template __global__ void stencil1d<int, 1>(int*, const int*, int);

__global__ void jacobi2d(float* o, const float* in, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x > 0 && y > 0 && x < w - 1 && y < h - 1)
        o[y * w + x] = 0.25f * (in[y * w + x - 1] + in[y * w + x + 1] + in[(y - 1) * w + x] + in[(y + 1) * w + x]);
}
__global__ void select(float* o, const float* a, const float* b, const int* m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = m[i] ? a[i] : b[i];
}
__global__ void vec2d(double2* o, const double2* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { double2 v = a[i]; o[i] = make_double2(v.y, v.x); }
}
__global__ void bytes(unsigned char* o, const unsigned char* a, const short* s, long long* l, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { o[i] = a[i] + (unsigned char)s[i]; atomicAdd((unsigned long long*)&l[i % 8], 1ull); atomicMax((int*)&l[8], i); }
}
__global__ void generic(float* p, int n) {
    extern __shared__ float sh[];
    float* q = (threadIdx.x & 1) ? sh : p;  // generic pointer: shared or global
    q[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x < n) p[threadIdx.x] += sh[threadIdx.x];
}
