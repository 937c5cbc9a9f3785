#!/usr/bin/env bash
# Times every variant in VARDIR (default build/variants, from benches/variants/build.sh) per benchmark,
# the native PTX first (ratios are against it). Usage: benches/variants/run.sh [VARDIR] [ROUNDS]
set -uo pipefail
d=${1:-build/variants}; rounds=${2:-7}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in stencil2d stencil2d_shared transpose histogram; do
  scen=$b; [ $b = stencil2d_shared ] && scen=stencil2d
  ls "$d/$b".*.ptx >/dev/null 2>&1 || continue
  echo "== $b"
  "$d/ptxtime" "$scen" "$rounds" "$d/$b.native.ptx" $(ls "$d/$b".*.ptx | grep -v '\.native\.ptx$')
done
# SASS of every variant (the GPU machine's CUDA has cuobjdump; the wheels do not) under $OUT/sass.
if [ -n "${OUT:-}" ] && command -v cuobjdump >/dev/null; then
  mkdir -p "$OUT/sass"
  for f in "$d"/*.ptx; do
    n=$(basename "$f" .ptx)
    ptxas -arch=sm_90 -o "/tmp/$n.cubin" "$f" && cuobjdump -sass "/tmp/$n.cubin" > "$OUT/sass/$n.sass"
  done
fi
