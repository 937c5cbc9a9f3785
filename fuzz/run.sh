#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS seconds each, starting from the committed
# seeds (fuzz/seeds/<target>) plus what earlier runs found (fuzz/corpus/<target>, ignored by git).
# A crash, panic, timeout or OOM leaves its input in fuzz/artifacts/<target>/ and fails the run.
# Prints one line per target: executions, exec/s, coverage (cov/ft), corpus size.
# Usage: fuzz/run.sh SECONDS [target...]    (env: FUZZ_JOBS=N runs N workers per target)
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:?seconds per target}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(container ptx_rewrite options ring_record)
bin=$(./build.sh)
failed=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$t/")
  [ -f "dict/$t.dict" ] && args+=(-dict="dict/$t.dict")
  [ "$t" = ptx_rewrite ] && args+=(-max_len=65536)
  log="artifacts/$t/last.log"
  if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
    # Workers share the corpus directory; fuzz-N.log per worker.
    args+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  fi
  if "$bin/$t" "${args[@]}" "corpus/$t" "seeds/$t" >"$log" 2>&1; then status=ok; else status=CRASH; failed+=("$t"); fi
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && cat fuzz-*.log >>"$log" && rm -f fuzz-*.log
  execs=$(grep -h '^stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
  last=$(grep -hE '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' || true)
  rate=$(grep -h '^stat::average_exec_per_sec' "$log" | awk '{s += $2} END {print s + 0}')
  echo "fuzz $t: $status, $execs executions in ${secs} s ($rate exec/s), $last"
  if [ $status != ok ]; then
    grep -hE 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|deadly signal' "$log" | head -20
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: crashes in ${failed[*]} (inputs in fuzz/artifacts/)" >&2; exit 1; }
