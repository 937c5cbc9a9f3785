#!/usr/bin/env bash
# Builds every benchmark with the pinned nvcc into OUTDIR (default .carry/bench):
#   NAME       sm_90 SASS + compute_90 PTX, -O3 -lineinfo (what gasan instruments)
#   NAME.csan  the same with `-sanitize memcheck` (compute-sanitizer's compile-time mode)
# Set BENCH_ONLY_PLAIN=1 to skip the .csan builds (CI).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/.carry/bench}
mkdir -p "$out"
cuda=$("$root/scripts/cuda-toolchain.sh")
arch="-gencode arch=compute_90,code=[compute_90,sm_90]"
build() {
  local src=$1 name; name=$(basename "$src" .cu)
  "$cuda/bin/nvcc" -O3 -lineinfo $arch -o "$out/$name" "$src"
  if [ -z "${BENCH_ONLY_PLAIN:-}" ]; then
    "$cuda/bin/nvcc" -O3 -lineinfo $arch -sanitize memcheck -o "$out/$name.csan" "$src"
  fi
}
export -f build; export cuda arch out
ls "$here"/src/*.cu | xargs -P "$(nproc)" -I{} bash -c 'build {}'
echo "$out"
