#include <cuda_pipeline.h>
__global__ void vecAdd(float* c, const float* a, const float* b, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) c[i]=a[i]+b[i];}
__global__ void vec4(float4* o, const float4* __restrict__ in, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) o[i]=__ldg(&in[i]);}
__global__ void hist(unsigned* h, const int* x, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) atomicAdd(&h[x[i]&255],1u);}
__global__ void red(float* s, const float* x){ __shared__ float sh[256]; sh[threadIdx.x]=x[threadIdx.x]; __syncthreads(); if(threadIdx.x==0){float t=0; for(int i=0;i<256;i++)t+=sh[i]; atomicAdd(s,t);} }
__global__ void cpa(float* o, const float* in){ __shared__ float sh[128]; __pipeline_memcpy_async(&sh[threadIdx.x], &in[threadIdx.x], 4); __pipeline_commit(); __pipeline_wait_prior(0); o[threadIdx.x]=sh[threadIdx.x];}
__device__ __noinline__ void put(double* p, double v){ *p = v; }
__global__ void gen(double* o){ double loc[8]; for(int i=0;i<8;i++) loc[i]=i*threadIdx.x; put(o+threadIdx.x, loc[threadIdx.x%8]); }
