#!/usr/bin/env bash
# Checked-PTX identity across a refactor of the rewriter: instruments every module of the
# repository's own PTX corpus with two gasan-ptx binaries under nine option sets (the six of the
# rewriter's modes, outside checks, no parameter bounds, and a rewrite split over 4 threads) and
# compares the checked PTX and the site tables byte for byte, and the exit status (a module both
# refuse with the same status, writing nothing, is the same). The corpus is nvcc's output (pinned toolchain,
# sm_90, -lineinfo; -rdc for the RDC samples) for the CUDA sources of tests/suite, benches/src,
# benches/startup, instrument/tests/{corpus,data}, runtime/gpu and examples, plus the PTX files of
# instrument/tests and the fuzz seeds; it is compiled once into .cache/identical-corpus.
# Usage: instrument/identical.sh OLD_GASAN_PTX [NEW_GASAN_PTX (default target/release/gasan-ptx)]
# Prints one line per differing (module, options) pair and a count; exits 1 when any differ.
# NEW_FLAGS: flags given to the new binary only (e.g. --no-param-bounds: a new pass turned off must
# leave the checked PTX as the old binary wrote it).
# Build the old binary from another revision with, for example:
#   git worktree add /tmp/old REV && cargo build --release --manifest-path /tmp/old/Cargo.toml \
#     --target-dir /tmp/old-target -p gasan-instrument
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=${1:?usage: instrument/identical.sh OLD_GASAN_PTX [NEW_GASAN_PTX]}
new=${2:-$root/target/release/gasan-ptx}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "identical.sh: $b is not an executable" >&2; exit 2; }; done
cuda=$("$root/scripts/cuda-toolchain.sh")
corpus="${GASAN_CACHE:-$root/.cache}/identical-corpus"
mkdir -p "$corpus"
for dir in tests/suite benches/src benches/startup instrument/tests/corpus instrument/tests/data runtime/gpu examples; do
  for cu in "$root/$dir"/*.cu; do
    [ -e "$cu" ] || continue
    out="$corpus/$(echo "$dir" | tr / _)_$(basename "$cu" .cu).ptx"
    [ "$out" -nt "$cu" ] && continue
    rdc=""; case $(basename "$cu") in *rdc*|device_fn.cu) rdc="-rdc=true";; esac
    "$cuda/bin/nvcc" -ptx -arch=sm_90 -lineinfo $rdc -I "$(dirname "$cu")" -o "$out" "$cu" 2>/dev/null ||
      echo "identical.sh: nvcc failed on $cu (left out)" >&2
  done
done
inputs=("$corpus"/*.ptx "$root"/instrument/tests/corpus/*.ptx "$root"/instrument/tests/data/*.ptx "$root"/fuzz/seeds/ptx_rewrite/*.ptx)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pairs=0; differ=0
# Two outputs are the same when neither was written or their bytes are.
same() { { [ ! -e "$1" ] && [ ! -e "$2" ]; } || cmp -s "$1" "$2"; }
for p in "${inputs[@]}"; do
  [ -e "$p" ] || continue
  for o in "" "--scale 7" "--no-opt" "--recover" "--no-hoist-loops" "--aligned-pool" "--outside-checks" "--no-param-bounds" "--threads 4"; do
    # shellcheck disable=SC2086 # $o is zero or more flags
    "$old" instrument $o "$p" -o "$tmp/o.ptx" --sites "$tmp/o.json" >/dev/null 2>&1 && ro=0 || ro=$?
    # shellcheck disable=SC2086
    "$new" instrument $o ${NEW_FLAGS:-} "$p" -o "$tmp/n.ptx" --sites "$tmp/n.json" >/dev/null 2>&1 && rn=0 || rn=$?
    pairs=$((pairs + 1))
    if [ "$ro" != "$rn" ] || ! same "$tmp/o.ptx" "$tmp/n.ptx" || ! same "$tmp/o.json" "$tmp/n.json"; then
      echo "differs: $(basename "$p") [${o:-default}] (exit $ro/$rn)"
      differ=$((differ + 1))
    fi
    rm -f "$tmp"/o.* "$tmp"/n.*
  done
done
echo "identical.sh: $pairs (module, options) pairs compared over ${#inputs[@]} modules; $differ differ"
[ "$differ" -eq 0 ]
