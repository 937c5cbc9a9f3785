#!/usr/bin/env bash
# Builds the examples into examples/out/ with the pinned nvcc (scripts/cuda-toolchain.sh installs it
# under .cache/ on first use; no GPU needed), or with the nvcc named by NVCC.
#   -arch=sm_75 embeds sm_75 SASS and compute_75 PTX: gasan checks the PTX, and it runs on every GPU
#   CUDA 13 supports (Turing and newer). Set ARCH to change it (e.g. ARCH=sm_90).
#   -lineinfo lets reports name the source line.
# Usage: examples/build.sh     env: NVCC, ARCH (sm_75)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nvcc=${NVCC:-$("$here/../scripts/cuda-toolchain.sh")/bin/nvcc}
mkdir -p "$here/out"
for src in "$here"/*.cu; do
  name=$(basename "$src" .cu)
  "$nvcc" -O2 -lineinfo -arch="${ARCH:-sm_75}" -o "$here/out/$name" "$src"
  echo "$here/out/$name"
done
