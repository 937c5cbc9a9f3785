#!/usr/bin/env bash
# Builds the GPU verification program with the pinned nvcc into OUTDIR (default .carry/gpu):
#   cases        sm_90 SASS + compute_90 PTX, -lineinfo (instrumentable)
#   cases_sass   sm_90 SASS only (no PTX: allocation-level protection only)
#   link         an application that links link_a.ptx + link_b.ptx itself with cuLink*
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/.carry/gpu}
mkdir -p "$out"
cuda=$("$root/scripts/cuda-toolchain.sh")
"$cuda/bin/nvcc" -O2 -lineinfo -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/cases" "$here/cases.cu"
"$cuda/bin/nvcc" -O2 -lineinfo -gencode arch=compute_90,code=sm_90 -o "$out/cases_sass" "$here/cases.cu"
"$cuda/bin/nvcc" -ptx -lineinfo -arch=compute_90 -o "$out/link_a.ptx" "$here/link_kernels.cu"
"$cuda/bin/nvcc" -ptx -lineinfo -arch=compute_90 -DLINK_B -o "$out/link_b.ptx" "$here/link_kernels.cu"
"$cuda/bin/nvcc" -O2 -gencode arch=compute_90,code=sm_90 -o "$out/link" "$here/link.cu"
echo "$out"
