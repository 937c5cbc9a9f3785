#!/usr/bin/env bash
# The rewriter's "still assembles" property over the fuzz corpus: for every committed input of
# fuzz/seeds/ptx_rewrite (nvcc's output and the fuzzers' finds kept as regression inputs: checked
# on every run, all of them) and a sample of N inputs from fuzz/corpus/ptx_rewrite (what this
# machine's explorations found) that ptxas accepts as they are, the checked PTX (gasan-ptx
# instrument under each option set below) must assemble too. Valid PTX that names gasan's reserved
# names (`__gasan_`, `%gs`) is refused on purpose and counted apart.
# Usage: fuzz/ptxas-check.sh [N]   (N = 0: the committed inputs only; needs GASAN_CUDA_ROOT or
# scripts/cuda-toolchain.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
root=${GASAN_CUDA_ROOT:-$(scripts/cuda-toolchain.sh)}
# Without ptxas every input would read as "does not assemble" and the check would pass empty.
[ -x "$root/bin/ptxas" ] || { echo "ptxas check: no ptxas at $root/bin/ptxas (GASAN_CUDA_ROOT)" >&2; exit 1; }
cargo build -q -p gasan-instrument --bin gasan-ptx --locked
ptx_tool=target/debug/gasan-ptx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every committed input, and a sample of what the fuzzer derived from them.
mapfile -t seeds < <(ls fuzz/seeds/ptx_rewrite/*)
sample=()
[ "$n" -gt 0 ] && mapfile -t sample < <(ls fuzz/corpus/ptx_rewrite/* 2>/dev/null | shuf -n "$n" --random-source=<(yes))
files=("${seeds[@]}" "${sample[@]}")
valid=0 bad=0 seeds_valid=0 reserved=0
for k in "${!files[@]}"; do
  f=${files[$k]}
  arch=$(grep -aoE '^\s*\.target\s+sm_[0-9]+' "$f" | grep -oE 'sm_[0-9]+' | head -1 || true)
  [ -n "$arch" ] || continue
  flags=(-arch="$arch")
  grep -aq '\.extern\|\.weak' "$f" && flags+=(-c)
  "$root/bin/ptxas" "${flags[@]}" "$f" -o "$tmp/in.cubin" >/dev/null 2>&1 || continue
  valid=$((valid + 1))
  [ "$k" -lt ${#seeds[@]} ] && seeds_valid=$((seeds_valid + 1))
  for opts in "" "--no-hoist-loops --scale 7" "--outside-checks --aligned-pool" "--recover --no-opt --no-param-bounds"; do
    # shellcheck disable=SC2086
    if ! "$ptx_tool" instrument $opts "$f" -o "$tmp/out.ptx" >/dev/null 2>"$tmp/err"; then
      # Valid PTX that names gasan's reserved names is refused on purpose (its original runs).
      if grep -q "are gasan's own" "$tmp/err"; then reserved=$((reserved + 1)); continue; fi
      echo "rewriter refused an input ptxas accepts ($opts): $f: $(cat "$tmp/err")"; bad=$((bad + 1)); continue
    fi
    if ! "$root/bin/ptxas" "${flags[@]}" "$tmp/out.ptx" -o "$tmp/out.cubin" 2>"$tmp/err"; then
      echo "checked PTX does not assemble ($opts): $f"; head -3 "$tmp/err"; bad=$((bad + 1))
    fi
  done
done
echo "ptxas check: ${#seeds[@]} committed inputs ($seeds_valid assemble as input) and ${#sample[@]} sampled from the corpus; $valid assemble as input, $bad failures after instrumentation, $reserved refusals of reserved names (on purpose)"
# nvcc's own output is among the committed inputs: if none of them assembles, ptxas itself is broken.
[ "$seeds_valid" -gt 0 ] || { echo "ptxas check: no committed input assembles; is ptxas working?" >&2; exit 1; }
[ "$bad" -eq 0 ]
