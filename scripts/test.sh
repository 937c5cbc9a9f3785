#!/usr/bin/env bash
# The project's one test command (README, .ci/run). Installs what it needs (cached under .cache/),
# then runs every step in scripts/test.d/ in name order. Any failing step fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
GASAN_CUDA_ROOT=$(scripts/cuda-toolchain.sh)
export GASAN_CUDA_ROOT
echo "gasan: CUDA toolchain at $GASAN_CUDA_ROOT ($("$GASAN_CUDA_ROOT/bin/nvcc" --version | tail -1))"
failed=()
for step in scripts/test.d/*.sh; do
  echo "=== ${step##*/}"
  start=$SECONDS
  if bash "$step"; then
    echo "=== ${step##*/}: ok ($((SECONDS - start)) s)"
  else
    echo "=== ${step##*/}: FAILED ($((SECONDS - start)) s)"
    failed+=("${step##*/}")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "gasan tests FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "gasan tests: all steps passed"
