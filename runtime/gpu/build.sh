#!/usr/bin/env bash
# Builds the GPU verification program with the pinned nvcc into OUTDIR (default build/gpu):
#   cases        sm_90 SASS + compute_90 PTX, -lineinfo (instrumentable)
#   cases_sass   sm_90 SASS only (no PTX: allocation-level protection only)
#   stress       reliability cases: whole-grid errors, stream-ordered pools, many processes
#   link         an application that links link_a.ptx + link_b.ptx itself with cuLink*
#   cases_shared cases with the shared cudart (lib/libcudart.so.13 copied next to it)
#   drvapp       a direct driver-API (-lcuda) application
#   mt_alloc     64 host threads x 10k cudaMalloc/cudaFree with read-back patterns (BENCH line)
#   mt_load      16 host threads x 50 rounds of cuModuleLoadData + cuLaunchKernel (-lcuda) and <<<>>> launches (BENCH line)
#   mt_register  16 host threads x 100 rounds of cudaHostRegister, a kernel over the registered memory, cudaHostUnregister
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/gpu}
mkdir -p "$out"
cuda=$("$root/scripts/cuda-toolchain.sh")
"$cuda/bin/nvcc" -O2 -lineinfo -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/cases" "$here/cases.cu"
"$cuda/bin/nvcc" -O2 -lineinfo -gencode arch=compute_90,code=sm_90 -o "$out/cases_sass" "$here/cases.cu"
"$cuda/bin/nvcc" -O2 -lineinfo -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/stress" "$here/stress.cu"
"$cuda/bin/nvcc" -ptx -lineinfo -arch=compute_90 -o "$out/link_a.ptx" "$here/link_kernels.cu"
"$cuda/bin/nvcc" -ptx -lineinfo -arch=compute_90 -DLINK_B -o "$out/link_b.ptx" "$here/link_kernels.cu"
"$cuda/bin/nvcc" -O2 -gencode arch=compute_90,code=sm_90 -o "$out/link" "$here/link.cu"
"$cuda/bin/nvcc" -O2 -Xcompiler -pthread -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/mt_alloc" "$here/mt_alloc.cu"
"$cuda/bin/nvcc" -O2 -lineinfo -Xcompiler -pthread -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/mt_register" "$here/mt_register.cu"
# The wheels ship libcudart.so.13 only; link against it through a temporary unversioned name.
stub=$(mktemp -d)
ln -s "$cuda/lib64/libcudart.so.13" "$stub/libcudart.so"
"$cuda/bin/nvcc" -O2 -lineinfo -cudart shared -L"$stub" -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/cases_shared" "$here/cases.cu"
mkdir -p "$out/lib" && cp -L "$cuda/lib64/libcudart.so.13" "$out/lib/"
gcc -O2 -Wall -I"$cuda/include" -c -o "$stub/drvapp.o" "$here/drvapp.c"
"$cuda/bin/nvcc" -O2 -Xcompiler -pthread -gencode arch=compute_90,code=[compute_90,sm_90] -c -o "$stub/mt_load.o" "$here/mt_load.cu"
"$root/scripts/libcuda-stub.sh" "$stub" "$stub/drvapp.o" "$stub/mt_load.o"
gcc -pthread -o "$out/drvapp" "$stub/drvapp.o" -L"$stub" -lcuda
"$cuda/bin/nvcc" -Xcompiler -pthread -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/mt_load" "$stub/mt_load.o" -L"$stub" -lcuda
rm -rf "$stub"
echo "$out"
