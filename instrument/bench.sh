#!/usr/bin/env bash
# Instrumentation benchmark: throughput of gasan-ptx over the corpus PTX (one core), and per-kernel
# register and SASS instruction growth from ptxas -v / cuobjdump-free size counts (original vs checked).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/.." && pwd)
cuda=$("$root/scripts/cuda-toolchain.sh"); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cargo build --release -q -p gasan-instrument --manifest-path "$root/Cargo.toml"
ptx_tool="$root/target/release/gasan-ptx"
for f in "$here"/tests/corpus/*.cu; do
  n=$(basename "$f" .cu); rdc=""; case $n in *rdc*|device_fn) rdc="-rdc=true";; esac
  "$cuda/bin/nvcc" -ptx -arch=sm_90 -lineinfo $rdc -o "$tmp/$n.ptx" "$f"
done
taskset -c 0 "$ptx_tool" bench "$tmp"/*.ptx --iters 50 2>/dev/null || "$ptx_tool" bench "$tmp"/*.ptx --iters 50
printf '%-44s %8s %8s %10s %10s\n' kernel regs checked_regs bytes checked_bytes
for p in "$tmp"/*.ptx; do
  "$ptx_tool" instrument "$p" -o "${p%.ptx}.checked.ptx" 2>/dev/null
  extra=""; case $p in *rdc*|*device_fn*) extra="-c";; esac
  paste <("$cuda/bin/ptxas" $extra -arch=sm_90 -v "$p" -o "$tmp/a.cubin" 2>&1 | grep -E "Compiling entry|Used" | paste - - | sed -E "s/.*entry function '([^']+)'.*Used ([0-9]+) registers.*/\1 \2/") \
        <("$cuda/bin/ptxas" $extra -arch=sm_90 -v "${p%.ptx}.checked.ptx" -o "$tmp/b.cubin" 2>&1 | grep -E "Compiling entry|Used" | paste - - | sed -E "s/.*Used ([0-9]+) registers.*/\1/") |
  while read -r k r c; do printf '%-44s %8s %8s\n' "${k:0:44}" "$r" "$c"; done
  printf '%-44s %8s %8s %10s %10s\n' "  module $(basename "$p")" "" "" "$(stat -c %s "$tmp/a.cubin")" "$(stat -c %s "$tmp/b.cubin")"
done
