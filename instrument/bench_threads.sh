#!/usr/bin/env bash
# Instrumentation throughput against threads: MB/s of `gasan-ptx bench --threads N` (N = 1, 2, 4,
# 8, 16, and the default, which splits modules of 64 KiB or more over the machine's cores in parts
# of 16 KiB or more) over a PTX corpus, over its largest module, over the largest module's first
# functions cut at 16, 32 and 64 KB (where threads start to pay: the default's threshold), and over
# each other module of 8 KB or more. Needs only the gasan-ptx binary, the PTX files and awk.
# Usage: instrument/bench_threads.sh [GASAN_PTX (default target/release/gasan-ptx)] [CORPUS_DIR
#        (default .cache/identical-corpus)] [ITERS (default 20; the largest module and the single
#        modules get 5x as many)]
# Each cell is the best of three runs (other load on the machine only lowers a run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/gasan-ptx}
corpus=${2:-$root/.cache/identical-corpus}
iters=${3:-20}
mapfile -t files < <(ls "$corpus"/*.ptx)
[ "${#files[@]}" -gt 0 ] || { echo "bench_threads.sh: no .ptx in $corpus" >&2; exit 2; }
largest=$(ls -S "${files[@]}" | head -1)
threads=(1 2 4 8 16 default)
best() { # best MB/s of three runs of: gasan-ptx bench ARGS...
  local b=0 r
  for _ in 1 2 3; do
    r=$("$bin" bench "$@" | sed -E 's/.*: ([0-9.]+) MB\/s/\1/')
    b=$(awk -v a="$b" -v c="$r" 'BEGIN { print (c > a) ? c : a }')
  done
  echo "$b"
}
flag() { [ "$1" = default ] || echo "--threads $1"; }
echo "cores: $(nproc); binary: $bin; corpus: ${#files[@]} modules, $(cat "${files[@]}" | wc -c) bytes"
printf '%-48s %9s' input bytes; for t in "${threads[@]}"; do printf ' %8s' "t=$t"; done; echo
row() { # label bytes iters files...
  local label=$1 bytes=$2 it=$3; shift 3
  printf '%-48s %9s' "$label" "$bytes"
  for t in "${threads[@]}"; do
    # shellcheck disable=SC2046 # zero or two words
    printf ' %8s' "$(best --iters "$it" $(flag "$t") "$@")"
  done
  echo
}
row "corpus (all modules)" "$(cat "${files[@]}" | wc -c)" "$iters" "${files[@]}"
row "largest: $(basename "$largest")" "$(wc -c <"$largest")" "$((iters * 5))" "$largest"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for kb in 16 32 64; do
  # The module up to the first function that closes (a `}` line at brace depth 0) past KB kilobytes.
  awk -v want=$((kb * 1000)) '{ print; n += length($0) + 1; d += gsub(/{/, "{") - gsub(/}/, "}"); if (d == 0 && $0 ~ /^}[ \t]*$/ && n >= want) exit }' "$largest" >"$tmp/first_${kb}k.ptx"
  size=$(wc -c <"$tmp/first_${kb}k.ptx")
  [ "$size" -lt "$(wc -c <"$largest")" ] || continue
  row "  its first functions, ${kb} KB" "$size" "$((iters * 10))" "$tmp/first_${kb}k.ptx"
done
for f in $(ls -S "${files[@]}"); do
  size=$(wc -c <"$f")
  [ "$size" -ge 8000 ] || continue
  [ "$f" = "$largest" ] && continue
  row "  $(basename "$f")" "$size" "$((iters * 5))" "$f"
done
