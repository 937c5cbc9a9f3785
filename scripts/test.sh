#!/usr/bin/env bash
# The project's one test command (README, .ci/run). Installs what it needs (cached under .cache/),
# then runs every step in scripts/test.d/ in name order. Any failing step fails the run.
# A step (or a cargo test, through scripts/cargo-skips.py) that cannot run something for want of a
# prerequisite (no GPU, ...) prints a line `SKIPPED: what: why`; the summary at the end lists them.
set -euo pipefail
cd "$(dirname "$0")/.."
GASAN_CUDA_ROOT=$(scripts/cuda-toolchain.sh)
export GASAN_CUDA_ROOT
echo "gasan: CUDA toolchain at $GASAN_CUDA_ROOT ($("$GASAN_CUDA_ROOT/bin/nvcc" --version | tail -1))"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=() rows=() skipped=()
for step in scripts/test.d/*.sh; do
  name=${step##*/}
  echo "=== $name"
  start=$SECONDS
  set +e
  bash "$step" 2>&1 | tee "$logs/$name"
  rc=${PIPESTATUS[0]}
  set -e
  mapfile -t s < <(sed -n 's/^[[:space:]]*SKIPPED: //p' "$logs/$name")
  for l in ${s[@]+"${s[@]}"}; do skipped+=("$name: $l"); done
  state=ok
  [ "$rc" -eq 0 ] || { state=FAILED; failed+=("$name"); }
  [ ${#s[@]} -eq 0 ] || state="$state, ${#s[@]} skipped"
  echo "=== $name: $state ($((SECONDS - start)) s)"
  rows+=("$(printf '  %-14s %s (%d s)' "$name" "$state" $((SECONDS - start)))")
done
echo
echo "=== summary"
printf '%s\n' "${rows[@]}"
if [ ${#skipped[@]} -gt 0 ]; then
  echo "SKIPPED (${#skipped[@]}; these were not tested):"
  printf '  %s\n' "${skipped[@]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "gasan tests FAILED: ${failed[*]}" >&2
  exit 1
fi
if [ ${#skipped[@]} -gt 0 ]; then
  echo "gasan tests: all steps passed, ${#skipped[@]} skipped (listed above)"
else
  echo "gasan tests: all steps passed, nothing skipped"
fi
