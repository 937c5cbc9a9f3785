#!/usr/bin/env bash
# gasan reliability checks on a GPU machine (issue 12): many gasan processes at once on one GPU,
# whole-grid errors, stream-ordered pools. Builds nothing: expects the release binaries in
# $GASAN_BIN (default target/release) and runtime/gpu/build.sh's programs in $GASAN_GPU_PROGS
# (default build/gpu); the suite's clean twins too when $GASAN_SUITE (a tests/build.sh output
# directory) and the benchmarks when $GASAN_BENCH (a benches/build.sh output directory) are set. Prints a table; exits non-zero if any row fails.
#   JOBS (16) processes at once, ROUNDS (5) rounds of the concurrency check.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${GASAN_BIN:-target/release}")
PROG=$(realpath "${GASAN_GPU_PROGS:-build/gpu}")
OUT=${OUT:-/tmp/gasan-stress-out}
JOBS=${JOBS:-16}
ROUNDS=${ROUNDS:-5}
ONLY=${ONLY:-all}
LIMIT=${LIMIT:-60}
mkdir -p "$OUT/logs"
if ! ls /dev/nvidia0 >/dev/null 2>&1; then echo "SKIPPED: gpu-stress: no GPU here (no /dev/nvidia0)"; exit 0; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GASAN_OPTIONS=${GASAN_OPTIONS:-cache_dir=$OUT/cache}
fails=0
rows=()
row() { rows+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")"); [ "$2" = PASS ] || fails=$((fails + 1)); }

# One program, many processes at once: every run must exit 0, print its clean output and no
# gasan warning or report. Args: NAME ROUNDS JOBS CMD...
concurrent() {
  local name=$1 rounds=$2 jobs=$3; shift 3
  local bad=0 runs=0 t0=$(date +%s%N)
  for r in $(seq "$rounds"); do
    local pids=()
    for j in $(seq "$jobs"); do
      ( "$@" >"$OUT/logs/$name.$r.$j.log" 2>&1; echo $? >"$OUT/logs/$name.$r.$j.rc" ) &
      pids+=($!)
    done
    wait "${pids[@]}"
    for j in $(seq "$jobs"); do
      runs=$((runs + 1))
      local log="$OUT/logs/$name.$r.$j.log"
      if [ "$(cat "$OUT/logs/$name.$r.$j.rc")" != 0 ] || grep -q "==gasan==\|GPUAddressSanitizer" "$log" || ! grep -q "result ok" "$log"; then
        bad=$((bad + 1))
        [ $bad -le 2 ] && { echo "--- $name round $r job $j (rc $(cat "$OUT/logs/$name.$r.$j.rc")):"; head -5 "$log"; }
      fi
    done
  done
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  row "$name x$jobs x$rounds" "$([ $bad = 0 ] && echo PASS || echo FAIL)" "$bad of $runs runs failed, ${ms} ms"
}

# A buggy run: must end within LIMIT s with exit code WANT and the pattern in its output.
# Args: NAME LIMIT WANT PATTERN CMD...
bounded() {
  local name=$1 limit=$2 want=$3 pat=$4; shift 4
  local log="$OUT/logs/$name.log" t0=$(date +%s%N)
  timeout -s KILL "$limit" "$@" >"$log" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local note="rc=$rc ${ms} ms"
  local kt; kt=$(grep -o "kernel returned .*" "$log" | head -1)
  local nrep; nrep=$(grep -c "ERROR: GPUAddressSanitizer" "$log")
  note="$note, $nrep report(s)$(grep -o '[0-9]* more bad device access' "$log" | head -1 | sed 's/^/, /')"
  if [ "$rc" = "$want" ] && grep -q -- "$pat" "$log"; then row "$name" PASS "$note"; else row "$name" FAIL "$note; want rc=$want and '$pat'"; tail -5 "$log"; fi
}

G="$BIN/gasan-run"
if [ "$ONLY" = all ] || [ "$ONLY" = grid ]; then
  for blocks in 64 4096; do
    bounded "grid_uaf_read b$blocks" $LIMIT 1 "heap-use-after-free" "$G" -- "$PROG/stress" grid_uaf_read $blocks
    bounded "grid_uaf_write b$blocks" $LIMIT 1 "heap-use-after-free" "$G" -- "$PROG/stress" grid_uaf_write $blocks
    bounded "grid_uaf_read recover b$blocks" $LIMIT 1 "heap-use-after-free" "$G" --halt-on-error 0 -- "$PROG/stress" grid_uaf_read $blocks
  done
  bounded "grid_uaf_async b64" $LIMIT 1 "heap-use-after-free" "$G" -- "$PROG/stress" grid_uaf_async 64
  bounded "grid_uaf_rounds b64" $LIMIT 1 "heap-use-after-free" "$G" -- "$PROG/stress" grid_uaf_rounds 64
fi
if [ "$ONLY" = all ] || [ "$ONLY" = pool ]; then
  for c in pool_churn pool_churn_frompool; do
    bounded "$c native" $LIMIT 0 "result ok" "$PROG/stress" $c
    grep -h BENCH "$OUT/logs/$c native.log"
    bounded "$c gasan" $LIMIT 0 "result ok" "$G" -- "$PROG/stress" $c
    grep -h BENCH "$OUT/logs/$c gasan.log"
  done
  bounded "pool_churn_uaf gasan" $LIMIT 1 "heap-use-after-free" "$G" -- "$PROG/stress" pool_churn_uaf
  # More large-block bytes over the program's life than the pool's VA (a 64 GiB pool: 8 GiB of
  # large-block VA per tag window): swept, then recycled, never out of memory.
  bounded "va_churn 64 GiB x 256 MiB" $LIMIT 0 "result ok" env GASAN_OPTIONS="$GASAN_OPTIONS:pool_size=68719476736" "$G" -- "$PROG/stress" va_churn 320
  grep -h "BENCH\|used up" "$OUT/logs/va_churn 64 GiB x 256 MiB.log" | head -3
fi
if [ "$ONLY" = all ] || [ "$ONLY" = procs ]; then
  concurrent small_clean "$ROUNDS" "$JOBS" "$G" -- "$PROG/stress" small_clean
  concurrent cases_multi_clean "$ROUNDS" "$JOBS" "$G" -- "$PROG/cases" multi_clean
  # The suite's clean twins (`PROG clean`) and the benchmarks, JOBS at once, ROUNDS rounds, each
  # compared with its native output.
  if [ -n "${GASAN_SUITE:-}" ]; then
    progs=$(cd "$GASAN_SUITE" && ls | grep -v "\\." | grep -v "_sass$\|_noline$" | sed "s|.*|$GASAN_SUITE/&:clean|")
    if python3 scripts/concurrent_check.py --gasan "$G" --jobs "$JOBS" --rounds "$ROUNDS" --label suite-clean $progs | tee "$OUT/suite.txt"; then ok=PASS; else ok=FAIL; fi
    row "suite clean twins x$JOBS x$ROUNDS" $ok "$(grep -o 'runs=.*' "$OUT/suite.txt")"
  fi
  if [ -n "${GASAN_BENCH:-}" ]; then
    progs=$(cd "$GASAN_BENCH" && ls | grep -v '\.' | sed "s|^|$GASAN_BENCH/|")
    if python3 scripts/concurrent_check.py --gasan "$G" --jobs "$JOBS" --rounds "$ROUNDS" --label benches $progs | tee "$OUT/bench.txt"; then ok=PASS; else ok=FAIL; fi
    row "benchmarks x$JOBS x$ROUNDS" $ok "$(grep -o 'runs=.*' "$OUT/bench.txt")"
  fi
fi
echo
printf '%-34s %-5s %s\n' check ok notes
printf '%s\n' "${rows[@]}"
echo "gpu-stress: $fails failed row(s)"
[ "$fails" = 0 ]
