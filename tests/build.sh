#!/usr/bin/env bash
# Builds the detection suite with the pinned nvcc into OUTDIR (default .carry/suite):
#   suite           sm_90 SASS + compute_90 PTX, -lineinfo   (gasan instruments the PTX)
#   suite_noline    the same without -lineinfo               (reports fall back to PTX lines)
#   suite_sass      sm_90 SASS only                          (no PTX: MMU-level protection only)
#   suite.csan      -lineinfo, `-sanitize memcheck`          (compute-sanitizer's compile-time mode)
# Set SUITE_ONLY_PLAIN=1 to build just `suite` (CI).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/.carry/suite}
mkdir -p "$out"
nvcc="$("$root/scripts/cuda-toolchain.sh")/bin/nvcc"
src="$here/suite/suite.cu"
both="-gencode arch=compute_90,code=[compute_90,sm_90]"
"$nvcc" -O2 -lineinfo $both -o "$out/suite" "$src"
if [ -z "${SUITE_ONLY_PLAIN:-}" ]; then
  "$nvcc" -O2 $both -o "$out/suite_noline" "$src" &
  "$nvcc" -O2 -lineinfo -gencode arch=compute_90,code=sm_90 -o "$out/suite_sass" "$src" &
  "$nvcc" -O2 -lineinfo $both -sanitize memcheck -o "$out/suite.csan" "$src" &
  wait
fi
echo "$out"
