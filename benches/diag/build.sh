#!/usr/bin/env bash
# Builds the driver-only load-time experiment into OUTDIR (default build/diag): loadexp (a -lcuda
# program timing cuModuleLoadData, cuModuleGetFunction and cuFuncLoad of one cubin) and the cubins
# it compares, all of benches/startup's 100-kernel module: native.cubin (nvcc's, with line tables),
# orig.cubin / orig_li.cubin (its PTX through ptxas -O3 without / with line tables), checked*.cubin
# (gasan's checked PTX through ptxas as gasan-run compiles it: default options, --aligned-pool,
# --no-param-bounds, --no-opt; and variants.py's, each with one part of the checks taken away).
# Needs target/release/gasan-ptx and build/startup/kernels100
# (benches/build.sh). Run on the GPU machine with benches/diag/run.sh OUTDIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/diag}
cuda=$("$root/scripts/cuda-toolchain.sh")
gptx=$root/target/release/gasan-ptx
tmp=$(mktemp -d)
mkdir -p "$out"
"$gptx" extract -o "$tmp/ent" "$root/build/startup/kernels100" >/dev/null
cp "$(ls "$tmp"/ent/*.cubin | xargs ls -S | head -1)" "$out/native.cubin"
ptx=$(ls "$tmp"/ent/*.ptx | head -1)
"$gptx" instrument "$ptx" -o "$tmp/checked.ptx"
"$gptx" instrument --aligned-pool "$ptx" -o "$tmp/checked_al.ptx"
"$gptx" instrument --no-param-bounds "$ptx" -o "$tmp/checked_nb.ptx"
"$gptx" instrument --no-opt "$ptx" -o "$tmp/checked_noopt.ptx"
python3 "$root/benches/diag/variants.py" "$tmp/checked.ptx" "$tmp"
variants="checked checked_al checked_nb checked_noopt $(cd "$tmp" && ls checked_*.ptx | grep -v "checked_\(al\|nb\|noopt\)" | sed "s/\.ptx$//")"
# OLD_GASAN_PTX: another build's gasan-ptx, for checked_old.cubin beside this build's.
if [ -n "${OLD_GASAN_PTX:-}" ]; then "$OLD_GASAN_PTX" instrument "$ptx" -o "$tmp/checked_old.ptx"; variants+=" checked_old"; fi
for v in $variants; do "$cuda/bin/ptxas" -arch=sm_90 -O3 --suppress-debug-info -o "$out/$v.cubin" "$tmp/$v.ptx"; done
"$cuda/bin/ptxas" -arch=sm_90 -O3 --suppress-debug-info -o "$out/orig.cubin" "$ptx"
"$cuda/bin/ptxas" -arch=sm_90 -O3 -lineinfo -o "$out/orig_li.cubin" "$ptx"
gcc -O2 -Wall -I"$cuda/include" -c -o "$tmp/loadexp.o" "$root/benches/diag/loadexp.c"
"$root/scripts/libcuda-stub.sh" "$tmp/stub" "$tmp/loadexp.o"
gcc -o "$out/loadexp" "$tmp/loadexp.o" -L"$tmp/stub" -lcuda
cp "$root/benches/diag/run.sh" "$out/"
rm -rf "$tmp"
ls -l "$out"
