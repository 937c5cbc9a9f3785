#!/usr/bin/env bash
# Builds the detection suite with the pinned nvcc (static cudart) into OUTDIR (default build/suite):
# every tests/suite/<case>.cu is one program, built as
#   <case>          -O2 -lineinfo, sm_90 SASS + compute_90 PTX   (gasan instruments the PTX)
#   <case>_noline   the same without -lineinfo                   (reports fall back to PTX lines)
#   <case>_sass     -lineinfo, sm_90 SASS only                   (no PTX: MMU-level protection only)
#   <case>.csan     -lineinfo, `-sanitize memcheck`              (compute-sanitizer's compile-time mode)
# The builds run in parallel, one nvcc per core. Set SUITE_ONLY_PLAIN=1 to build just `<case>` (CI).
# Usage: tests/build.sh [OUTDIR]    (prints OUTDIR)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/build/suite}
mkdir -p "$out"
out=$(cd "$out" && pwd)
nvcc="$("$root/scripts/cuda-toolchain.sh")/bin/nvcc"
variants="plain"
[ -n "${SUITE_ONLY_PLAIN:-}" ] || variants="plain noline sass csan"
export nvcc out
build_one() {  # VARIANT SOURCE
  local src=$2 name both="-gencode arch=compute_90,code=[compute_90,sm_90]"
  name=$(basename "$src" .cu)
  case $1 in
    plain)  "$nvcc" -O2 -lineinfo $both -o "$out/$name" "$src" ;;
    noline) "$nvcc" -O2 $both -o "$out/${name}_noline" "$src" ;;
    sass)   "$nvcc" -O2 -lineinfo -gencode arch=compute_90,code=sm_90 -o "$out/${name}_sass" "$src" ;;
    csan)   "$nvcc" -O2 -lineinfo $both -sanitize memcheck -o "$out/$name.csan" "$src" ;;
  esac || { echo "tests/build.sh: $1 build of $src failed" >&2; return 1; }
}
export -f build_one
shopt -s nullglob
srcs=("$here"/suite/*.cu)
[ ${#srcs[@]} -gt 0 ] || { echo "tests/build.sh: no programs in $here/suite" >&2; exit 1; }
for v in $variants; do
  for s in "${srcs[@]}"; do printf '%s\n%s\n' "$v" "$s"; done
done | xargs -d '\n' -n 2 -P "$(nproc)" bash -c 'build_one "$@"' _
echo "$out"
