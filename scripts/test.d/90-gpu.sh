#!/usr/bin/env bash
# GPU-only checks: run for real on a GPU machine (see README), skipped cleanly elsewhere.
set -euo pipefail
if ! ls /dev/nvidia0 >/dev/null 2>&1; then
  echo "GPU tests skipped: no NVIDIA GPU on this machine (run scripts/gpu-check.sh on a GPU machine)"
  exit 0
fi
cargo build --release
runtime/gpu/build.sh >/dev/null
GASAN_BIN=target/release bash scripts/gpu-check.sh
