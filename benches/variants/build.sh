#!/usr/bin/env bash
# Builds benches/variants/ptxtime with the pinned nvcc into OUTDIR (default build/variants) and writes
# the PTX variants it times: for each benchmark in VARIANT_BENCHES (default stencil2d
# stencil2d_shared transpose histogram) its native PTX, and make_variants.py's mechanical variants
# of the aligned-pool checked PTX (gasan-ptx from target/release). Hand-made variants are added to
# OUTDIR by hand and listed in benches/results/variants.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/variants}
mkdir -p "$out"
cuda=$("$root/scripts/cuda-toolchain.sh")
stub=$(mktemp -d); trap 'rm -rf "$stub"' EXIT
# The control block's layout from its one definition (instrument/src/abi.rs).
"$root/target/release/gasan-ptx" abi > "$stub/gasan_abi.h"
"$cuda/bin/nvcc" -O2 -I"$stub" -c -o "$stub/ptxtime.o" "$here/ptxtime.cu"
"$root/scripts/libcuda-stub.sh" "$stub" "$stub/ptxtime.o"
"$cuda/bin/nvcc" -O2 -o "$out/ptxtime" "$stub/ptxtime.o" -L"$stub" -lcuda
for b in ${VARIANT_BENCHES:-stencil2d stencil2d_shared transpose histogram}; do
  "$cuda/bin/nvcc" -O3 -lineinfo -arch=compute_90 -ptx -I"$root/benches/src" -o "$out/$b.native.ptx" "$root/benches/src/$b.cu"
  "$root/target/release/gasan-ptx" instrument --aligned-pool -o "$stub/$b.checked.ptx" "$out/$b.native.ptx" 2>/dev/null
  python3 "$here/make_variants.py" "$stub/$b.checked.ptx" "$out" "$b"
done
echo "$out"
