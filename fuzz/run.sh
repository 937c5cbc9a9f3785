#!/usr/bin/env bash
# For every fuzz target (or those named): first replays each committed input of
# fuzz/seeds/<target> once, by name (nvcc's output and every input a fuzzer found, kept as
# regression inputs): the same inputs on every run, whatever the timed exploration finds. Then,
# when SECONDS > 0, explores for SECONDS seconds from those seeds plus what earlier runs found
# (fuzz/corpus/<target>, ignored by git). A crash, panic, timeout or OOM leaves its input in
# fuzz/artifacts/<target>/ and fails the run. Prints one line per target for the replay and one for
# the exploration: executions, exec/s, coverage (cov/ft), corpus size.
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
  # The replay: libFuzzer runs each file named on its command line once.
  seeds=("seeds/$t"/*)
  log="artifacts/$t/replay.log"
  if "$bin/$t" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" "${seeds[@]}" >"$log" 2>&1; then
    echo "fuzz $t: replayed ${#seeds[@]} committed inputs, ok"
  else
    echo "fuzz $t: replay of the committed inputs FAILED"
    grep -hE 'Running:|panicked|ERROR: libFuzzer|SUMMARY|deadly signal' "$log" | tail -20
    failed+=("$t")
    continue
  fi
  [ "$secs" -gt 0 ] || continue
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$t/")
  [ -f "dict/$t.dict" ] && args+=(-dict="dict/$t.dict")
  [ "$t" = ptx_rewrite ] && args+=(-max_len=65536)
  log="artifacts/$t/last.log"
  if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then
    # Workers share the corpus directory; fuzz-N.log per worker.
    args+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  fi
  if "$bin/$t" "${args[@]}" "corpus/$t" "seeds/$t" >"$log" 2>&1; then status=ok; else status=CRASH; failed+=("$t"); fi
  # (libFuzzer copies each worker's fuzz-N.log into its own output as the worker exits: appended
  # again, every worker's stats were counted twice.)
  [ "${FUZZ_JOBS:-1}" -gt 1 ] && rm -f fuzz-*.log
  execs=$(grep -h '^stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
  last=$(grep -hE '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' || true)
  rate=$(grep -h '^stat::average_exec_per_sec' "$log" | awk '{s += $2} END {print s + 0}')
  echo "fuzz $t: $status, $execs executions in ${secs} s ($rate exec/s), $last"
  if [ $status != ok ]; then
    grep -hE 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|deadly signal' "$log" | head -20
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: crashes in ${failed[*]} (inputs in fuzz/artifacts/)" >&2; exit 1; }
