#!/usr/bin/env bash
# Framework pools seen through (issue 18), on a machine with an NVIDIA GPU: CuPy, PyTorch (through
# DLPack) and Numba kernels reading one float past a 4000-byte array must be reported under
# gasan-run, their clean twins and a small PyTorch training loop must not, and the loop's slowdown
# is measured. Each case runs under $GASAN_BIN/gasan-run and natively (python3, no gasan).
# Builds nothing: needs gasan-run and libgasan_runtime.so in $GASAN_BIN. Frameworks that are not
# installed give SKIPPED rows. Prints a table; exits 1 if a row fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${GASAN_BIN:-target/release}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gasan-python-out}
LIMIT=${LIMIT:-150}
CASES=runtime/gpu/python/cases.py
mkdir -p "$OUT/logs"
if ! ls /dev/nvidia0 >/dev/null 2>&1; then echo "SKIPPED: gpu-python: no GPU here (no /dev/nvidia0)"; exit 0; fi
[ -x "$BIN/gasan-run" ] || { echo "gpu-python: no $BIN/gasan-run (set GASAN_BIN)"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for m in torch cupy numba; do
  printf '%-6s %s\n' "$m" "$($PY -c "import $m; print($m.__version__)" 2>/dev/null || echo 'not installed')"
done
# The checked-module cache in $OUT (first runs compile checked cubins: keep $OUT to measure warm runs).
export GASAN_OPTIONS="cache_dir=$OUT/cache${GASAN_OPTIONS:+:$GASAN_OPTIONS}"
fails=0
rows=()
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
# check CASE EXPECT(report|clean) [PATTERN...]: a pattern the gasan log must hold ("!" = must not).
check() {
  local case=$1 want=$2; shift 2
  local glog="$OUT/logs/$case.gasan.log" nlog="$OUT/logs/$case.native.log"
  local t0=$(date +%s%N)
  timeout "$LIMIT" "$PY" "$CASES" "$case" >"$nlog" 2>&1
  local nrc=$? nms=$(ms $t0)
  if [ $nrc = 77 ]; then
    rows+=("$(printf '%-15s %-7s %-4s %-9s %-7s %8s %8s  %s' "$case" "$want" - - SKIPPED - - "$(grep -m1 SKIPPED "$nlog")")")
    return
  fi
  if [ $nrc != 0 ]; then
    # The framework itself does not work here (e.g. Numba against this CUDA): nothing to compare.
    rows+=("$(printf '%-15s %-7s %-4s %-9s %-7s %8s %8s  %s' "$case" "$want" - - SKIPPED - - "SKIPPED: fails natively (rc=$nrc): $(tail -1 "$nlog" | cut -c1-100)")")
    return
  fi
  t0=$(date +%s%N)
  timeout "$LIMIT" "$BIN/gasan-run" --verbosity 1 -- "$PY" "$CASES" "$case" >"$glog" 2>&1
  local rc=$? gms=$(ms $t0)
  local rep=no ok=PASS why=""
  grep -q "ERROR: GPUAddressSanitizer" "$glog" && rep=yes
  if [ "$want" = report ]; then
    [ "$rc" = 1 ] || { ok=FAIL; why="rc=$rc want 1"; }
    [ $rep = yes ] || { ok=FAIL; why="$why; no report"; }
  else
    [ "$rc" = 0 ] || { ok=FAIL; why="rc=$rc want 0"; }
    [ $rep = no ] || { ok=FAIL; why="$why; false report"; }
    grep -q "^result ok" "$glog" || { ok=FAIL; why="$why; no 'result ok'"; }
  fi
  [ "$nrc" = 0 ] || why="$why (native rc=$nrc)"
  for p in "$@"; do
    if [ "${p:0:1}" = "!" ]; then
      grep -q -- "${p:1}" "$glog" && { ok=FAIL; why="$why; unexpected '${p:1}'"; }
    else
      grep -q -- "$p" "$glog" || { ok=FAIL; why="$why; missing '$p'"; }
    fi
  done
  [ $ok = PASS ] || fails=$((fails + 1))
  rows+=("$(printf '%-15s %-7s %-4s %-9s %-7s %6sms %6sms  %s' "$case" "$want" "$rc" "$rep" "$ok" "$gms" "$nms" "$why")")
}

OVER=("heap-buffer-overflow" "READ of size 4 in kernel read_at" "0 bytes after 4000-byte region" "!result ok")
check cupy_clean     clean  "cupy_pool_used_bytes 0"
check cupy_overflow  report "${OVER[@]}" "cupy_pool_used_bytes 0"
check torch_clean    clean
check torch_overflow report "${OVER[@]}"
check numba_clean    clean
check numba_overflow report "heap-buffer-overflow" "0 bytes after 4000-byte region" "!result ok"
check train          clean  "loop_seconds"

echo
printf '%-15s %-7s %-4s %-9s %-7s %8s %8s  %s\n' case expected rc reported result gasan native notes
printf '%s\n' "${rows[@]}"
# The training loop's steady state (20 steps after a first one), native vs gasan.
g=$(sed -n 's/^loop_seconds //p' "$OUT/logs/train.gasan.log" 2>/dev/null)
n=$(sed -n 's/^loop_seconds //p' "$OUT/logs/train.native.log" 2>/dev/null)
if [ -n "$g" ] && [ -n "$n" ]; then
  echo
  echo "train loop (20 steps): native ${n}s, gasan ${g}s, slowdown $(awk -v g="$g" -v n="$n" 'BEGIN{printf "%.2fx", g/n}')"
fi
# What a report of a Python program names as the allocation site (the host stack).
for c in cupy_overflow torch_overflow; do
  [ -f "$OUT/logs/$c.gasan.log" ] || continue
  echo; echo "--- $c: report (first 30 lines of $OUT/logs/$c.gasan.log) ---"
  grep -A29 -m1 "ERROR: GPUAddressSanitizer" "$OUT/logs/$c.gasan.log"
done
echo; grep -h "==gasan== modules:" "$OUT/logs/train.gasan.log" 2>/dev/null | sed 's/^/train: /'
echo "logs: $OUT/logs"
# Skipped cases as lines of their own, which scripts/test.sh gathers into its summary.
for r in "${rows[@]}"; do
  case $r in *SKIPPED*) echo "SKIPPED: gpu-python ${r%% *}: ${r#*SKIPPED: }" ;; esac
done
[ $fails = 0 ] || { echo "gpu-python: $fails FAILED"; exit 1; }
echo "gpu-python: all PASS (or SKIPPED)"
