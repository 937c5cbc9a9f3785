#!/usr/bin/env bash
# Runs gasan's GPU verification on a machine with an NVIDIA GPU. Builds nothing: expects the release
# binaries in target/release and the test programs from runtime/gpu/build.sh in build/gpu
# (carry both to the GPU machine). Prints a table; exits non-zero if any row fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${GASAN_BIN:-target/release}
PROG=${GASAN_GPU_PROGS:-build/gpu}
OUT=${OUT:-/tmp/gasan-gpu-out}
mkdir -p "$OUT/logs"
if ! ls /dev/nvidia0 >/dev/null 2>&1; then echo "SKIPPED: gpu-check: no GPU here (no /dev/nvidia0)"; exit 0; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GASAN_OPTIONS=cache_dir=$OUT/cache
# cases_shared needs the shared cudart carried next to it (the static programs ignore this).
export LD_LIBRARY_PATH="$PROG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
rows=()
# run NAME BIN CASE SCALE EXPECT_RC PATTERN...
check() {
  local name=$1 bin=$2 case=$3 scale=$4 want_rc=$5; shift 5
  local log="$OUT/logs/$name.s$scale.log"
  local t0=$(date +%s%N)
  if [ "$scale" = native ]; then
    "$PROG/$bin" "$case" >"$log" 2>&1
  elif [ "$scale" = leaks ]; then
    "$BIN/gasan-run" --detect-leaks 1 -- "$PROG/$bin" "$case" >"$log" 2>&1
  elif [ "$scale" = outside ]; then
    "$BIN/gasan-run" --outside-checks 1 -- "$PROG/$bin" "$case" >"$log" 2>&1
  elif [ "$scale" = recover ]; then
    "$BIN/gasan-run" --halt-on-error 0 -- "$PROG/$bin" "$case" >"$log" 2>&1
  else
    "$BIN/gasan-run" --shadow-scale "$scale" -- "$PROG/$bin" "$case" >"$log" 2>&1
  fi
  local rc=$?
  local secs=$(( ($(date +%s%N) - t0) / 1000000 ))
  local ok=PASS miss=""
  [ "$rc" = "$want_rc" ] || { ok=FAIL; miss="rc=$rc want $want_rc"; }
  for p in "$@"; do
    if [ "${p:0:1}" = "!" ]; then
      grep -q -- "${p:1}" "$log" && { ok=FAIL; miss="$miss; unexpected '${p:1}'"; }
    else
      grep -q -- "$p" "$log" || { ok=FAIL; miss="$miss; missing '$p'"; }
    fi
  done
  [ $ok = PASS ] || fails=$((fails + 1))
  rows+=("$(printf '%-22s %-11s %-6s %-4s %-5s %6sms %s' "$name" "$bin" "$scale" "$rc" "$ok" "$secs" "$miss")")
}

for s in 8 7; do
  check vecadd_clean cases vecadd_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check multi_clean cases multi_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check tagged_api cases tagged_api $s 0 "result ok" "!GPUAddressSanitizer"
  check managed_api cases managed_api $s 0 "result ok" "!GPUAddressSanitizer"
  check managed_handlers cases managed_handlers $s 0 "result ok" "!GPUAddressSanitizer"
  check hostalloc_api cases hostalloc_api $s 0 "result ok" "!GPUAddressSanitizer"
  check hostalloc_overflow cases hostalloc_overflow $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAt" "0 bytes after 4000-byte pinned host region" "!result ok"
  check managed_overflow cases managed_overflow $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAt" "0 bytes after 4194048-byte managed region" "!result ok"
  check overflow_write cases overflow_write $s 1 "ERROR: GPUAddressSanitizer: heap-buffer-overflow" "WRITE of size 4 in kernel vecAddOffByOne" "cases.cu:" "0 bytes after 4000-byte region" "!result ok"
  check overflow_read cases overflow_read $s 1 "heap-buffer-overflow" "READ of size 4 in kernel readAt" "0 bytes after 4000-byte region"
  check underflow_read cases underflow_read $s 1 "heap-buffer-overflow" "READ of size 4 in kernel readAt" "4 bytes before 4000-byte region"
  check overflow_far cases overflow_far $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAt" "65536 bytes after 4000-byte region"
  check uaf cases uaf $s 1 "heap-use-after-free" "READ of size 4 in kernel readAt" "freed by thread T0"
  # Pointer arguments carry their block's bounds (runtime/src/arg_bounds.rs): a pointer into the
  # middle of a buffer, and a graph replayed after its buffer was freed (captured launches carry none).
  check interior_clean cases interior_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check interior_underflow cases interior_underflow $s 1 "heap-buffer-overflow" "READ of size 4 in kernel readAt" "4 bytes before 4000-byte region"
  check coop_clean cases coop_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check coop_overflow cases coop_overflow $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAt" "0 bytes after 4000-byte region"
  check graph_clean cases graph_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check graph_uaf cases graph_uaf $s 1 "heap-use-after-free" "READ of size 4 in kernel readAt"
  check uaf_delayed cases uaf_delayed $s 1 "heap-use-after-free" "WRITE of size 4 in kernel writeAt"
  check double_free cases double_free $s 1 "double-free"
  check memcpy_overflow cases memcpy_overflow $s 1 "heap-buffer-overflow" "cuMemcpy" "0 bytes after 4000-byte region"
  check memcpy2d_clean cases memcpy2d_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check memcpy2d_overflow cases memcpy2d_overflow $s 1 "heap-buffer-overflow" "cuMemcpy2D" "!result ok"
  check memset2d_overflow cases memset2d_overflow $s 1 "heap-buffer-overflow" "cuMemsetD2D" "!result ok"
  check memcpy_batch_clean cases memcpy_batch_clean $s 0 "result ok" "!GPUAddressSanitizer"
  check memcpy_batch_ovf cases memcpy_batch_overflow $s 1 "heap-buffer-overflow" "cuMemcpyBatchAsync" "WRITE of size 4256" "0 bytes after 4000-byte region" "!result ok"
  # The application's own cuLink of two PTX inputs: each input checked with its own control block.
  check link_clean link clean $s 0 "result ok" "!GPUAddressSanitizer"
  check link_overflow link overflow $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAtB" "link_kernels.cu:10" "0 bytes after 4000-byte region" "!result ok"
  check link_file_overflow link file-overflow $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAtB" "!result ok"
  check large_overflow cases large_overflow $s 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAt" "65536 bytes after 4194304-byte region"
  # SASS-only: no check runs; the guard-gap fault is attributed through the nvidia-uvm tools queue.
  check large_overflow_sass cases_sass large_overflow $s 1 "heap-buffer-overflow on address" "WRITE in an uninstrumented kernel" "65536 bytes after 4194304-byte region" "!result ok"
done
# Recover mode: the bad access is reported and skipped, the program finishes, the exit code is gasan's.
check overflow_write cases overflow_write recover 1 "heap-buffer-overflow" "WRITE of size 4 in kernel vecAddOffByOne" "result ok"
check uaf cases uaf recover 1 "heap-use-after-free" "result ok"
check leak cases leak leaks 1 "result ok" "detected memory leaks" "Direct leak of 4000 byte(s)" "Direct leak of 8000 byte(s)"
check vecadd_clean_leaks cases vecadd_clean leaks 0 "result ok" "!detected memory leaks"
check vecadd_clean cases vecadd_clean native 0 "result ok"
check managed_api cases managed_api native 0 "result ok"
check managed_handlers cases managed_handlers native 0 "result ok"
check hostalloc_api cases hostalloc_api native 0 "result ok"
check link_clean link clean native 0 "result ok"
# Other ways in: the shared cudart, and a direct driver-API (-lcuda) program through the exported cu* symbols.
check shared_vecadd cases_shared vecadd_clean 8 0 "result ok" "!GPUAddressSanitizer"
check shared_overflow cases_shared overflow_write 8 1 "heap-buffer-overflow" "WRITE of size 4 in kernel vecAddOffByOne" "cases.cu:" "!result ok"
check shared_uaf cases_shared uaf 8 1 "heap-use-after-free" "!result ok"
check shared_vecadd cases_shared vecadd_clean native 0 "result ok"
check drvapp_clean drvapp clean 8 0 "result ok" "!GPUAddressSanitizer"
check drvapp_overflow drvapp overflow 8 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAtB" "link_kernels.cu:10" "!result ok"
check drvapp_clean drvapp clean native 0 "result ok"
# Stream-ordered allocation from a thread without a current context (the stream names one).
check drvapp_thread_clean drvapp thread_clean 8 0 "result ok" "!GPUAddressSanitizer" "!WARNING"
check drvapp_thread_clean drvapp thread_clean native 0 "result ok"
check drvapp_thread_overflow drvapp thread_overflow 8 1 "heap-buffer-overflow" "WRITE of size 4 in kernel writeAtB" "0 bytes after 4000-byte region" "!result ok"
# Many host threads: 64 threads x 10k cudaMalloc/cudaFree in one process, patterns read back (BENCH line in the logs).
if [ -n "${GASAN_CHECK_QUICK:-}" ]; then
  echo "SKIPPED: mt_alloc (64 host threads, ~80 s): GASAN_CHECK_QUICK is set"
else
  check mt_alloc mt_alloc 64 8 0 "result ok" "BENCH mt_alloc threads=64" "!GPUAddressSanitizer"
  check mt_alloc mt_alloc 64 native 0 "result ok" "BENCH mt_alloc threads=64"
fi
# Many host threads loading modules at once: 16 threads x 50 rounds, each round a PTX module of its
# own (cuModuleLoadData, cuLaunchKernel on the thread's stream) and, every other round, a <<<>>>
# launch of the program's own kernel; overflow: thread 0's round-3 addk writes one element past `out`.
check mt_load_clean mt_load clean 8 0 "result ok" "BENCH mt_load" "!GPUAddressSanitizer"
check mt_load_clean mt_load clean native 0 "result ok"
check mt_load_overflow mt_load overflow 8 1 "heap-buffer-overflow" "WRITE of size 4 in kernel addk" "0 bytes after 4000-byte region" "!result ok"
# Host threads registering host memory while others' kernels read theirs (outside checks): the
# outside table switched under running kernels, freed memory registered again.
check mt_register_clean mt_register clean outside 0 "result ok" "!GPUAddressSanitizer"
check mt_register_clean mt_register clean native 0 "result ok"
check mt_register_overflow mt_register overflow outside 1 "heap-buffer-overflow" "READ of size 4 in kernel sum_registered" "0 bytes after" "host-registered region" "registered by thread T0" "!result ok"
# Two GPUs (rows meaningful on a machine with two; with one the program says so and passes).
check mgpu_clean cases mgpu_clean 8 0 "result ok" "!GPUAddressSanitizer"
check mgpu_overflow cases mgpu_overflow 8 "$([ "$(nvidia-smi -L | wc -l)" -ge 2 ] && echo 1 || echo 0)" "$([ "$(nvidia-smi -L | wc -l)" -ge 2 ] && echo heap-buffer-overflow || echo 'result ok')"
check link_overflow link overflow native 0 "result ok"
check overflow_write cases overflow_write native 0 "result ok"

# Kernel-patch backend: the stock nvidia-uvm here must refuse the gasan query, and gasan-run must
# fall back to the CUDA VMM (nothing is loaded on this shared machine).
kmod_log="$OUT/logs/kmod_probe.log"
"$BIN/gasan-uvm" selftest --backend kmod >"$kmod_log" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "not the gasan-patched module" "$kmod_log"; then ok=PASS; else ok=FAIL; fails=$((fails + 1)); fi
rows+=("$(printf '%-22s %-11s %-6s %-4s %-5s %6sms %s' kmod_probe gasan-uvm - "$rc" "$ok" 0 "$(grep -o 'kmod backend unavailable.*' "$kmod_log" | head -c 90)")")
check vecadd_vmm_fallback cases vecadd_clean 8 0 "result ok" "!GPUAddressSanitizer"
GASAN_OPTIONS="cache_dir=$OUT/cache verbosity=1" "$BIN/gasan-run" -- "$PROG/cases" vecadd_clean > "$OUT/logs/backend.log" 2>&1
grep -q "backend: CUDA VMM" "$OUT/logs/backend.log" || { fails=$((fails + 1)); rows+=("backend line missing: $(grep backend "$OUT/logs/backend.log" | head -1)"); }
# Its launches passed bounds in their pointer arguments (and with arg_bounds=0 none did).
grep -q "launches: [1-9][0-9]*, [1-9][0-9]* with block bounds" "$OUT/logs/backend.log" || { fails=$((fails + 1)); rows+=("no launch with bounds: $(grep 'launches:' "$OUT/logs/backend.log" | head -1)"); }
GASAN_OPTIONS="cache_dir=$OUT/cache verbosity=1 arg_bounds=0" "$BIN/gasan-run" -- "$PROG/cases" vecadd_clean > "$OUT/logs/noargb.log" 2>&1
grep -q "launches: [1-9][0-9]*, 0 with block bounds" "$OUT/logs/noargb.log" || { fails=$((fails + 1)); rows+=("arg_bounds=0 still tagged: $(grep 'launches:' "$OUT/logs/noargb.log" | head -1)"); }
# With a warm cache the module was loaded ahead of its first launch and handed to cudart; with
# preload=0, or under eager loading, none was.
grep -q "loaded ahead of their first launch: [1-9][0-9]* (.*), [1-9][0-9]* of them handed" "$OUT/logs/backend.log" || { fails=$((fails + 1)); rows+=("no module loaded ahead: $(grep 'loaded ahead' "$OUT/logs/backend.log" | head -1)"); }
GASAN_OPTIONS="cache_dir=$OUT/cache verbosity=1 preload=0" "$BIN/gasan-run" -- "$PROG/cases" vecadd_clean > "$OUT/logs/nopreload.log" 2>&1
CUDA_MODULE_LOADING=EAGER GASAN_OPTIONS="cache_dir=$OUT/cache verbosity=1" "$BIN/gasan-run" -- "$PROG/cases" vecadd_clean > "$OUT/logs/eager.log" 2>&1
for l in nopreload eager; do
  grep -q "result ok" "$OUT/logs/$l.log" && grep -q "loaded ahead of their first launch: 0 " "$OUT/logs/$l.log" || { fails=$((fails + 1)); rows+=("$l: $(grep -E 'loaded ahead|result' "$OUT/logs/$l.log" | head -2 | tr '\n' ' ')"); }
done

echo
printf '%-22s %-11s %-6s %-4s %-5s %8s %s\n' case binary scale rc ok time notes
for r in "${rows[@]}"; do echo "$r"; done

echo
echo "== costs (median, µs)"
for mode in native gasan; do
  for c in bench_alloc bench_launch bench_launch_args; do
    if [ $mode = native ]; then line=$("$PROG/cases" $c 2>&1 | grep BENCH); else line=$("$BIN/gasan-run" -- "$PROG/cases" $c 2>&1 | grep BENCH); fi
    echo "$mode $c: $line"
  done
done
echo "== module load: first run (cold instrumentation cache) vs second (warm)"
rm -rf "$OUT/cache2"
for i in 1 2; do
  t0=$(date +%s%N); GASAN_OPTIONS="cache_dir=$OUT/cache2 verbosity=1" "$BIN/gasan-run" -- "$PROG/cases" vecadd_clean >"$OUT/logs/cache$i.log" 2>&1
  echo "run $i: $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(grep -o 'modules:.*' "$OUT/logs/cache$i.log")"
done
t0=$(date +%s%N); "$PROG/cases" vecadd_clean >/dev/null 2>&1; echo "native: $(( ($(date +%s%N) - t0) / 1000000 )) ms"

echo
echo "gpu-check: $fails failed row(s)"
[ $fails = 0 ]
