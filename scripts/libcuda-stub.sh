#!/usr/bin/env bash
# Writes OUTDIR/libcuda.so, a link-time stand-in for the driver's libcuda.so.1 (the pinned
# toolchain's wheels ship no stub): one empty function for each cu* symbol the given objects leave
# undefined (driver names only, cu[A-Z]*: an nvcc object's cuda* runtime calls belong to cudart).
# Programs linked against it load the real driver's libcuda.so.1 at run time.
# Usage: scripts/libcuda-stub.sh OUTDIR OBJECT...
set -euo pipefail
out=${1:?usage: scripts/libcuda-stub.sh OUTDIR OBJECT...}; shift
mkdir -p "$out"
nm -u "$@" | awk '$2 ~ /^cu[A-Z]/ {print "int " $2 "(void) { return 999; }"}' | sort -u > "$out/libcuda_stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so" "$out/libcuda_stub.c"
