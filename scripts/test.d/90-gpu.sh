#!/usr/bin/env bash
# GPU-only checks: run for real on a GPU machine (see README), skipped cleanly elsewhere.
# gpu-check.sh: detection and costs of the verification cases; gpu-stress.sh: many gasan processes
# at once, whole-grid errors and stream-ordered pools (issue 12). With GASAN_SUITE / GASAN_BENCH
# pointing at built suite / benchmark directories, gpu-stress also runs their clean programs 16 at
# a time. gpu-python.sh: framework pools (CuPy, PyTorch, Numba; issue 18).
set -euo pipefail
if ! ls /dev/nvidia0 >/dev/null 2>&1; then
  echo "SKIPPED: GPU tests (scripts/gpu-check.sh, scripts/gpu-stress.sh, scripts/gpu-python.sh): no NVIDIA GPU on this machine (no /dev/nvidia0; README: GPU tests)"
  exit 0
fi
cargo build --release
runtime/gpu/build.sh >/dev/null
GASAN_BIN=target/release bash scripts/gpu-check.sh
GASAN_BIN=target/release bash scripts/gpu-stress.sh
GASAN_BIN=target/release bash scripts/gpu-python.sh
