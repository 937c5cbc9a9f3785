#!/usr/bin/env bash
# The rewriter's "still assembles" property over the fuzz corpus: for the seeds and a sample of N
# inputs from fuzz/corpus/ptx_rewrite that ptxas accepts as they are, the checked
# PTX (gasan-ptx instrument: default options, --no-hoist-loops --scale 7, and --outside-checks
# --aligned-pool) must assemble too.
# Usage: fuzz/ptxas-check.sh [N]   (needs GASAN_CUDA_ROOT or scripts/cuda-toolchain.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
root=${GASAN_CUDA_ROOT:-$(scripts/cuda-toolchain.sh)}
cargo build -q -p gasan-instrument --bin gasan-ptx --locked
ptx_tool=target/debug/gasan-ptx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every seed (nvcc output), and a sample of what the fuzzer derived from them.
mapfile -t files < <(ls fuzz/seeds/ptx_rewrite/*; ls fuzz/corpus/ptx_rewrite/* 2>/dev/null | shuf -n "$n" --random-source=<(yes))
valid=0 bad=0
for f in "${files[@]}"; do
  arch=$(grep -aoE '^\s*\.target\s+sm_[0-9]+' "$f" | grep -oE 'sm_[0-9]+' | head -1 || true)
  [ -n "$arch" ] || continue
  flags=(-arch="$arch")
  grep -aq '\.extern\|\.weak' "$f" && flags+=(-c)
  "$root/bin/ptxas" "${flags[@]}" "$f" -o "$tmp/in.cubin" >/dev/null 2>&1 || continue
  valid=$((valid + 1))
  for opts in "" "--no-hoist-loops --scale 7" "--outside-checks --aligned-pool"; do
    # shellcheck disable=SC2086
    if ! "$ptx_tool" instrument $opts "$f" -o "$tmp/out.ptx" >/dev/null 2>&1; then
      echo "rewriter refused an input ptxas accepts ($opts): $f"; bad=$((bad + 1)); continue
    fi
    if ! "$root/bin/ptxas" "${flags[@]}" "$tmp/out.ptx" -o "$tmp/out.cubin" 2>"$tmp/err"; then
      echo "checked PTX does not assemble ($opts): $f"; head -3 "$tmp/err"; bad=$((bad + 1))
    fi
  done
done
echo "ptxas check: ${#files[@]} sampled, $valid assemble as input, $bad failures after instrumentation"
[ "$bad" -eq 0 ]
