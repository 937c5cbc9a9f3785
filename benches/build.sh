#!/usr/bin/env bash
# Builds every benchmark with the pinned nvcc into OUTDIR (default build/bench):
#   NAME       sm_90 SASS + compute_90 PTX, -O3 -lineinfo (what gasan instruments)
#   NAME.csan  the same with `-sanitize memcheck` (compute-sanitizer's compile-time mode)
# and the whole-program benchmarks of benches/startup (benches/run_startup.py) into STARTUP_OUT
# (default build/startup), stripped: startup1 / kernels100 (kernels.cu with 1 / 100 kernels) and
# one binary per short program, benches/diag/kernel_times, alloc_cost and vmm_cost.
# Set BENCH_ONLY_PLAIN=1 to skip the .csan builds (CI); BENCH_ONLY_STARTUP=1 to build only
# benches/startup.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/build/bench}
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
sout=${STARTUP_OUT:-$root/build/startup}
mkdir -p "$sout"
build_startup() {
  local src=$1 name=$2; shift 2
  "$cuda/bin/nvcc" -O3 -lineinfo $arch "$@" -o "$sout/$name" "$src"
  strip "$sout/$name"
}
export -f build build_startup; export cuda arch out sout
if [ -z "${BENCH_ONLY_STARTUP:-}" ]; then
  ls "$here"/src/*.cu | xargs -P "$(nproc)" -I{} bash -c 'build {}'
fi
{
  echo "$here/startup/kernels.cu startup1 -DNK=1"
  echo "$here/startup/kernels.cu kernels100 -DNK=100"
  for f in "$here"/startup/*.cu; do
    [ "$(basename "$f")" = kernels.cu ] || echo "$f $(basename "$f" .cu)"
  done
  # Per-kernel steady state of scan and jacobi2d (benches/diag/cache_variants.py): their sources
  # included with main renamed, whose missing return is then warned about.
  echo "$here/diag/kernel_times.cu kernel_times -diag-suppress 940 -Xcompiler -Wno-return-type"
  # Host cost of an allocation and its free, by size (gpu-batch.sh alloccost).
  echo "$here/diag/alloc_cost.cu alloc_cost"
} | xargs -P "$(nproc)" -L1 bash -c 'build_startup "$@"' _
# The VMM calls behind a large block, timed (gpu-batch.sh alloccost): a driver-only C program,
# linked against a stand-in libcuda.
vtmp=$(mktemp -d)
gcc -O2 -Wall -I"$cuda/include" -c -o "$vtmp/vmm_cost.o" "$here/diag/vmm_cost.c"
"$root/scripts/libcuda-stub.sh" "$vtmp/stub" "$vtmp/vmm_cost.o"
gcc -o "$sout/vmm_cost" "$vtmp/vmm_cost.o" -L"$vtmp/stub" -lcuda
rm -rf "$vtmp"
echo "$out"
echo "$sout"
