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
# The GPU programs are sm_90 builds (runtime/gpu/build.sh, tests/build.sh): older GPUs cannot run
# them, so the step says so instead of failing.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 || true)
if [ -z "$cc" ] || [ "${cc%%.*}" -lt 9 ]; then
  echo "SKIPPED: GPU tests (scripts/gpu-check.sh, scripts/gpu-stress.sh, scripts/gpu-python.sh): they need a Hopper (sm_90) or newer GPU; this one reports compute capability '${cc:-unknown}' (README: GPU tests)"
  exit 0
fi
cargo build --release
# README's quick start, as a newcomer runs it: the example's planted overflow is reported.
examples/build.sh >/dev/null
out=$(target/release/gasan-run -- examples/out/overflow 2>&1 || true)
grep -q "ERROR: GPUAddressSanitizer: heap-buffer-overflow" <<<"$out" || { echo "examples/out/overflow under gasan-run: no heap-buffer-overflow report:"; echo "$out"; exit 1; }
echo "examples/overflow: reported as README shows"
runtime/gpu/build.sh >/dev/null
GASAN_BIN=target/release bash scripts/gpu-check.sh
GASAN_BIN=target/release bash scripts/gpu-stress.sh
GASAN_BIN=target/release bash scripts/gpu-python.sh
