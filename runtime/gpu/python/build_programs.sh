#!/usr/bin/env bash
# Builds the suite programs of issue 39's and 40's groups (tests/expectations.json entries with a
# `group`), and the Python cases' own programs (runtime/gpu/python/*.cu), into OUTDIR (default
# build/suite-new), as tests/build.sh builds a suite program (pinned nvcc, -O2 -lineinfo, sm_90
# SASS + compute_90 PTX): a few MB to carry to a GPU machine
# instead of the whole suite. scripts/gpu-batch.sh's jit/mgpu steps use OUTDIR when it exists.
# Usage: runtime/gpu/python/build_programs.sh [OUTDIR]   (prints OUTDIR)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build/suite-new}
mkdir -p "$out"
out=$(cd "$out" && pwd)
nvcc="$("$root/scripts/cuda-toolchain.sh")/bin/nvcc"
python3 -c '
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c.get("group"):
        print(c["source"])' "$root/tests/expectations.json" | while read -r src; do
  name=$(basename "$src" .cu)
  "$nvcc" -O2 -lineinfo -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/$name" "$root/tests/$src" \
    || { echo "build_programs.sh: $src failed" >&2; exit 1; }
done
# The Python cases' own programs (runtime/gpu/python/*.cu, found by the cases in --bin-dir); -ldl
# for those that dlopen their library (nccl_allreduce.cu opens PyTorch's libnccl).
for src in "$root"/runtime/gpu/python/*.cu; do
  name=$(basename "$src" .cu)
  "$nvcc" -O2 -lineinfo -gencode arch=compute_90,code=[compute_90,sm_90] -o "$out/$name" "$src" -ldl \
    || { echo "build_programs.sh: $src failed" >&2; exit 1; }
done
echo "$out"
