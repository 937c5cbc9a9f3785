#!/usr/bin/env bash
# The project's one test command (README, .ci/run). Installs what it needs (cached under .cache/),
# then runs every step in scripts/test.d/ in name order. Any failing step fails the run.
# A step (or a cargo test, through scripts/cargo-skips.py) that cannot run something for want of a
# prerequisite (no GPU, ...) prints a line `SKIPPED: what: why`; the summary at the end lists them
# in two groups: "no GPU" (hardware no fetch can provide) and any other. Under CI=true (.ci/run
# sets it) any other skip fails the run: the project fetches its prerequisites itself (qemu, the
# kernel, libclang, the CUDA wheels), so such a skip would hide a claim; steps fail on a failed
# fetch there too.
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
# Skips for want of a GPU: no NVIDIA GPU, one older than the sm_90 builds, or a GPU driver present
# where a test needs its absence (uvm-shim's no-nvidia-uvm check).
gpu_skip='no (NVIDIA )?GPU|/dev/nvidia0|compute capability|has nvidia-uvm'
no_gpu=() other=()
for l in ${skipped[@]+"${skipped[@]}"}; do
  if grep -qE "$gpu_skip" <<<"$l"; then no_gpu+=("$l"); else other+=("$l"); fi
done
if [ ${#no_gpu[@]} -gt 0 ]; then
  echo "SKIPPED, no GPU (${#no_gpu[@]}; only a machine with a Hopper or newer GPU tests these):"
  printf '  %s\n' "${no_gpu[@]}"
fi
if [ ${#other[@]} -gt 0 ]; then
  echo "SKIPPED, not for want of a GPU (${#other[@]}; these were not tested):"
  printf '  %s\n' "${other[@]}"
  [ "${CI:-}" != true ] || failed+=("${#other[@]} skip(s) not for want of a GPU under CI=true")
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "gasan tests FAILED: ${failed[*]}" >&2
  exit 1
fi
if [ ${#skipped[@]} -gt 0 ]; then
  echo "gasan tests: all steps passed; skipped: ${#no_gpu[@]} for want of a GPU, ${#other[@]} other (listed above)"
else
  echo "gasan tests: all steps passed, nothing skipped"
fi
