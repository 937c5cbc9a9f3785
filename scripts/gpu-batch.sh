#!/usr/bin/env bash
# Several GPU steps in one command (a lent GPU machine runs one command at a time): unpacks the suite and
# benchmark builds carried as build/pack/suite-bench.tar.xz (tar -C build -cf - suite bench | xz), then runs
# each STEP with its own time limit and keeps its output in $OUT/STEP.txt (the device tool returns
# $OUT), ending with a table of steps, exit codes and seconds. Binaries: stripped copies of
# target/release in build/bin. Usage: scripts/gpu-batch.sh STEP[:SECONDS] ...
# Steps: quick (README's quick start) examples (every examples/ program's report into $OUT/examples, to replace examples/expected) first (first launches, 15 interleaved rounds) check stress python new4 loops suite suiteg startup startupv benches cost costd costs;
# preload: kernels100's first launch with preload 1 and 0 (verbosity 1); costold benchesold use build/bin-old; benchesna: arg_bounds=0; flv: verbose logs of kernels100's first launch; early: kernels100's first launch cold, warm, prepared before set-up, with a wrongly remembered GPU.
# outside: the host-registered cases (outside_checks=1) and the managed and mapped ones; benchesout, suite8out, startupout: benchesg, suite8 and startup with outside_checks=1.
# checkqold, suite8old: checkq and suite8 with build/bin-old (a refactor's before and after on one machine).
# suiteonly: the suite's cases named in SUITE_ONLY (comma-separated) at scale 8; checkq: check without mt_alloc; suite8: the suite at shadow scale 8 only; spaces: the suite's shared, local and scope cases; stressgrid: gpu-stress's whole-grid errors only; threads: instrument/bench_threads.sh of build/bin over build/corpus (a copy of the identical corpus); bigthreads: gasan-ptx bench of build/bin-old and build/bin over build/big (a multi-MB module) at 1-16 threads.
# frames: the suite's local cases in called functions (frames.rs) and their neighbours, with compute-sanitizer.
# sass: SASS (cuobjdump) of build/sass-in/*.ptx into $OUT/sass.
# cvar: benches/diag/cache_variants.py over kernel_times and build/kernel-variants's stencils (each part of the checks taken out of the cached checked PTX).
# jit, mgpu: issue 39's and 40's GPU tests (runtime/gpu/python/run_groups.py: Python cases and the suite's programs of that group,
# native, gasan and compute-sanitizer, one table; programs from build/suite-new, built by runtime/gpu/python/build_programs.sh, else the pack):
# jit is Triton, NVRTC and Numba (2 at once), jitfw torch.compile and JAX (no compute-sanitizer); jit8, mgpu8: every case 8 at once, without compute-sanitizer.
# jitsel, mgpusel: the jit and mgpu groups' cases matching JIT_MATCH / MGPU_MATCH, 4 at once, no compute-sanitizer.
# numba: the jit group's Numba cases with numpy 2.2 or 2.3 from .whl on PYTHONPATH (the image's numba 0.68 fails natively with its numpy 2.5: no row_stack), with compute-sanitizer.
# jitab: benches/jit/run.py's steady state (native-warm, gasan-warm) with build/bin-old and build/bin, interleaved, JITAB_ROUNDS (2) rounds.
# pair: benches/jit/pair.py under each build of PAIR_BINS (default build/bin-old, build/bin; an entry DIR@OPTIONS runs with GASAN_OPTIONS=OPTIONS, a plain DIR with the caller's; each entry compiles into a Triton cache of its own), with PAIR_ARGS (e.g. --queued): checked and native Triton kernels timed alternately in one process.
# variants: benches/jit/pair.py --queued over VARIANT_KERNELS (attention_fwd,matmul) once per VARIANTS entry (default full norange nopre nopreshared nopreglobal nopost norange,nopre,nopost; also nopostshared, nopostglobal): benches/diag/ptx_variant.py takes that part of the checks out of the checked PTX (unsound, a measurement of what each part costs; pair.py's output comparison rejects a variant that lost program work).
# qprobe: benches/jit/queue_probe.py natively and under gasan-run (each kernel timed alone and 50 queued: host work per launch against kernel time).
# jitbench: benches/jit/run.py (Triton kernels and a torch.compile model: native, gasan, compute-sanitizer; cold and warm caches); extdiag: examples/torch_extension.py under gasan-run at verbosity 1 and 2.
# asyncdiag: torch.compile's model with PyTorch's cudaMallocAsync backend, natively and under gasan-run --framework-pools 0 --verbosity 2 (full logs in $OUT/asyncdiag-*.txt).
# drvthread: drvapp's thread_clean and thread_overflow (allocation from a thread with no current context) with build/bin-old, then build/bin.
# mtloop: gpu-check's mt_load_overflow (16 host threads loading and launching at once) MTLOOP_N times (20) with build/bin-old, then build/bin, for each PTX version of MTLOOP_PTX (e.g. "default 8.6": mt_load's MT_LOAD_PTX_VERSION): the first report's kind, counted.
# alloccost: benches/diag/alloc_cost (built into build/startup by benches/build.sh) natively, with build/bin-old and build/bin: host µs of an allocation and its free by size, cudaMalloc and cudaMallocAsync; vmm_cost (the VMM calls of a 16 MiB block: per chunk or whole); then torch_allocs.py (the compiled model's allocations per step, by size class).
# hosttimes: the compiled model's step natively (caching allocator on and off) and under build/bin with call_times=1 (default, unmap_thread=0, framework_pools=0: where the host time goes), full outputs in $OUT/hosttimes-model-*.txt; then alloc_cost with call_times=1.
# modelab: the compiled model's training step (triton_bench.py --only model) natively, with build/bin-old and build/bin, three interleaved rounds.
# diag: the driver-only load experiment (benches/diag, built into build/diag); firstab, costab: first launches and steady state of build/bin against build/bin-old, interleaved in one run.
set -u
export PYTHONUNBUFFERED=1
R=${OUT:-/tmp/r}; mkdir -p "$R"
B=$(realpath build/bin)
# An older build for A/B runs on the same machine (costold, benchesold), when carried.
BO=$(realpath build/bin-old 2>/dev/null || echo /nonexistent)
W=/tmp/w
if [ ! -d $W/suite ]; then mkdir -p $W && tar -C $W -xJf build/pack/suite-bench.tar.xz; fi
# Suite programs built after the pack (carried as build/suite-new) join it.
if [ -d build/suite-new ]; then cp -f build/suite-new/* $W/suite/; fi
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
summary=()
for spec in "$@"; do
  step=${spec%%:*}; lim=${spec#*:}; [ "$lim" = "$spec" ] && lim=300
  t0=$(date +%s)
  case $step in
    quick)   NVCC=/usr/local/cuda/bin/nvcc timeout $lim bash examples/build.sh && timeout $lim $B/gasan-run -- examples/out/overflow; echo "gasan-run exit status $?" ;;
    examples) NVCC=/usr/local/cuda/bin/nvcc timeout $lim bash examples/build.sh && mkdir -p $R/examples && for p in overflow use_after_free shared_overflow; do timeout $lim $B/gasan-run -- examples/out/$p >$R/examples/$p.txt 2>&1; echo "$p: gasan-run exit status $?"; done; timeout $lim $B/gasan-run -- python3 examples/torch_extension.py >$R/examples/torch_extension.txt 2>&1; echo "torch_extension: gasan-run exit status $?" ;;
    check)   OUT=/tmp/o-check GASAN_BIN=$B timeout $lim bash scripts/gpu-check.sh ;;
    checkq)  OUT=/tmp/o-check GASAN_BIN=$B GASAN_CHECK_QUICK=1 timeout $lim bash scripts/gpu-check.sh ;;
    checkqold) OUT=/tmp/o-checkold GASAN_BIN=$BO GASAN_CHECK_QUICK=1 timeout $lim bash scripts/gpu-check.sh ;;
    suite8old) timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $BO/gasan-run --tools native,gasan-s8 --jobs 16 --out /tmp/o-suite8old ;;
    stress)  OUT=/tmp/o-stress GASAN_BIN=$B GASAN_SUITE=$W/suite GASAN_BENCH=$W/bench timeout $lim bash scripts/gpu-stress.sh ;;
    python)  OUT=/tmp/o-python GASAN_BIN=$B timeout $lim bash scripts/gpu-python.sh ;;
    new4)    timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7,cs --jobs 8 --out /tmp/o-new4 --only shared_cp_async_overflow,shared_ldmatrix_overflow,shared_wmma_overflow,wmma_global_overflow ;;
    loops)   timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7,gasan-sass,cs --jobs 8 --out /tmp/o-loops --only loop_overrun,loop_overrun_large,loop_stride_far,loop_uaf_large,loop_uaf_small,loop_overrun_rows ;;
    suite)   timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7,cs --jobs 14 --out /tmp/o-suite ;;
    spaces)  timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7 --jobs 14 --out /tmp/o-spaces --only local_negative_index,local_overflow,local_write_negative,shared_cp_async_overflow,shared_dynamic_overflow,shared_dynamic_read_past,shared_histogram_bad_bin,shared_ldmatrix_overflow,shared_next_array,shared_read_past,shared_static_overflow,shared_wmma_overflow,use_after_return_scope,use_after_scope,tag_neighbour_read ;;
    frames)  timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7,cs --jobs 14 --out /tmp/o-frames --only local_callee_read_past,local_callee_write_past,local_nested_callee_read,use_after_return_callee,use_after_return_scope,local_negative_index,local_overflow,local_write_negative,use_after_scope,device_fn_overflow ;;
    stressgrid) OUT=/tmp/o-stress ONLY=grid GASAN_BIN=$B timeout $lim bash scripts/gpu-stress.sh ;;
    threads) timeout $lim bash instrument/bench_threads.sh $B/gasan-ptx build/corpus 10 ;;
    bigthreads) for b in $BO $B; do for t in 1 4 8 16 default; do f=; [ $t = default ] || f="--threads $t"; for r in 1 2 3; do echo "$b t=$t $(timeout $lim $b/gasan-ptx bench $f --iters 5 build/big/*.ptx)"; done; done; done ;;
    suiteonly) timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8 --jobs 16 --out /tmp/o-suiteonly --only "$SUITE_ONLY" ;;
    suite8)  timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8 --jobs 16 --out /tmp/o-suite8 ;;
    suiteg)  timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7 --jobs 14 --out /tmp/o-suiteg ;;
    startup) timeout $lim python3 benches/run_startup.py --bin-dir build/startup --gasan $B/gasan-run --repeat 3 --out /tmp/o-startup/startup.md ;;
    startupout) GASAN_OPTIONS=outside_checks=1 timeout $lim python3 benches/run_startup.py --bin-dir build/startup --gasan $B/gasan-run --repeat 3 --out /tmp/o-startupout/startup.md ;;
    cost)    timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --bin-dir build/startup ;;
    costd)   timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --bin-dir build/startup --only first --diag ;;
    costf)   timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --bin-dir build/startup --only first ;;
    first)   timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --bin-dir build/startup --only first --reps 15 --cfgs native,gasan,preload0,instr0,native-eager,gasan-eager ;;
    costs)   timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --bin-dir build/startup --only steady ;;
    costold) timeout $lim python3 benches/cost_split.py --gasan $BO/gasan-run --bin-dir build/startup --only steady ;;
    benchesold) timeout $lim python3 benches/run_benches.py --bin-dir $W/bench --gasan $BO/gasan-run --no-sanitizer --out /tmp/o-benchesold ;;
    outside) timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8,gasan-s7,cs --jobs 12 --out /tmp/o-outside --only host_register_overflow_read,host_register_overflow_write,host_register_after_unregister,hostalloc_overflow_read,managed_overflow,managed_overflow_read,managed_uaf ;;
    suite8out) GASAN_OPTIONS=outside_checks=1 timeout $lim python3 tests/run_suite.py --bin-dir $W/suite --gasan $B/gasan-run --tools native,gasan-s8 --jobs 16 --out /tmp/o-suite8out ;;
    benchesout) GASAN_OPTIONS=outside_checks=1 timeout $lim python3 benches/run_benches.py --bin-dir $W/bench --gasan $B/gasan-run --no-sanitizer --out /tmp/o-benchesout ;;
    benchesg) timeout $lim python3 benches/run_benches.py --bin-dir $W/bench --gasan $B/gasan-run --no-sanitizer --out /tmp/o-benchesg ;;
    benchesna) timeout $lim python3 benches/run_benches.py --bin-dir $W/bench --gasan $B/gasan-run --no-sanitizer --gasan-options arg_bounds=0 --out /tmp/o-benchesna ;;
    flv)     mkdir -p /tmp/o-flv; for m in lazy EAGER; do for i in 1 2 3; do CUDA_MODULE_LOADING=${m/lazy/LAZY} $B/gasan-run --verbosity 2 --cache-dir /tmp/o-flv-cache -- build/startup/kernels100 b 1 > /tmp/o-flv/$m$i.txt 2>&1; grep -E "FIRST|control block|preset|module loading|cubins" /tmp/o-flv/$m$i.txt | head -12; done; done ;;
    preload) for i in 0 1 2 3; do for p in 1 0; do $B/gasan-run --verbosity 1 --preload $p --cache-dir /tmp/o-preload-cache -- build/startup/kernels100 b 1 2>&1 | grep -E "FIRST|loaded ahead" | sed "s/^/preload=$p: /"; done; done ;;
    early)   c=/tmp/o-early-cache; rm -rf $c; k() { $B/gasan-run --verbosity 1 --cache-dir $c "$@" -- build/startup/kernels100 b 1 2>&1 | grep -E "FIRST|loaded ahead|prepared" | sed "s/^/$run: /"; }
             for run in cold early1 early2 early3; do k; done; run=preload0; k --preload 0
             sed -i 's/^cc .*/cc 86/' $c/*.device; for run in wrong-cc early-again; do k; done ;;
    startupv) mkdir -p /tmp/o-sv; for p in startup1 kernels100 gemm; do for i in 1 2; do $B/gasan-run --verbosity 1 --cache-dir /tmp/o-sv/cache -- build/startup/$p 2>&1 | grep -i "gasan" | head -20; done; done ;;
    alloccost) for b in native $BO $B; do c=(); [ $b = native ] || { [ -x $b/gasan-run ] || continue; c=($b/gasan-run --); }; echo "== $b"; timeout $lim "${c[@]}" build/startup/alloc_cost 200; done; timeout $lim build/startup/vmm_cost 100; timeout $lim python3 benches/diag/torch_allocs.py 10 2>&1 | tail -2 ;;
    hosttimes) m() { timeout $lim python3 benches/jit/triton_bench.py --reps 500 --only model "$@" 2>&1; }
             echo "== native: $(m | grep -E '^(STEP|COMPILE) ' | tr '\n' ' ')"; echo "== native, PyTorch's caching allocator off: $(PYTORCH_NO_CUDA_MEMORY_CACHING=1 m | grep -E '^(STEP|COMPILE) ' | tr '\n' ' ')"
             for o in "" unmap_thread=0 framework_pools=0; do echo "== gasan call_times=1 $o"; GASAN_OPTIONS="call_times=1 $o" timeout $lim $B/gasan-run -- python3 benches/jit/triton_bench.py --reps 500 --only model > $R/hosttimes-model-${o:-default}.txt 2>&1; grep -E '^(STEP|COMPILE) ' $R/hosttimes-model-${o:-default}.txt; awk '/host time by call/{n++} n==0{next} {print}' $R/hosttimes-model-${o:-default}.txt | tail -45; done
             echo "== alloc_cost native"; timeout $lim build/startup/alloc_cost 200 2>&1 | tail -20
             for o in "" unmap_thread=0; do echo "== alloc_cost, call_times=1 $o"; GASAN_OPTIONS="call_times=1 $o" timeout $lim $B/gasan-run -- build/startup/alloc_cost 200 2>&1 | tail -45; done ;;
    modelab) for r in 1 2 3; do for b in native $BO $B; do c=(); [ $b = native ] || c=($b/gasan-run --); echo "round $r $b: $(timeout $lim "${c[@]}" python3 benches/jit/triton_bench.py --reps 25 --only model 2>&1 | grep -E '^(STEP|COMPILE) ' | tr '\n' ' ')"; done; done ;;
    diag)    ROUNDS=8 timeout $lim bash benches/diag/run.sh build/diag ;;
    firstab) timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --old $BO/gasan-run --bin-dir build/startup --only first --reps 11 --cfgs native,gasan,old ;;
    cvar)    for prog in build/startup/kernel_times build/kernel-variants/stencil2d_shared build/kernel-variants/stencil2d; do [ -x $prog ] || continue; echo "== $prog"
               timeout $lim python3 benches/diag/cache_variants.py --gasan $B/gasan-run ${CVAR_ARGS:---variants full,nochecks,nochecks+notags,orig+notags --native-env nativejit=CUDA_FORCE_PTX_JIT=1 --opt instr0=instrument=0} --rounds ${CVAR_ROUNDS:-5} -- $prog; done ;;
    sass)    mkdir -p $R/sass; for f in build/sass-in/*.ptx; do n=$(basename $f .ptx); ptxas -arch=sm_90 -O3 -o /tmp/$n.cubin $f && cuobjdump -sass /tmp/$n.cubin > $R/sass/$n.sass; done; ls -l $R/sass ;;
    costab)  timeout $lim python3 benches/cost_split.py --gasan $B/gasan-run --old $BO/gasan-run --bin-dir build/startup --only steady --cfgs native,gasan,old ;;
    benches) timeout $lim python3 benches/run_benches.py --bin-dir $W/bench --gasan $B/gasan-run --out /tmp/o-benches ;;
    jit)     timeout $lim python3 runtime/gpu/python/run_groups.py --group jit --match '^(triton|nvrtc|numba)' --jobs 2 --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 240 --out /tmp/o-jit ;;
    jitfw)   timeout $lim python3 runtime/gpu/python/run_groups.py --group jit --match '^(torch_compile|jax)' --no-sanitizer --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 240 --out /tmp/o-jitfw ;;
    jit8)    timeout $lim python3 runtime/gpu/python/run_groups.py --group jit --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 240 --jobs 8 --no-sanitizer --out /tmp/o-jit8 ;;
    jitab)   for r in $(seq ${JITAB_ROUNDS:-2}); do for b in $BO $B; do timeout $lim python3 benches/jit/run.py --gasan $b/gasan-run --rounds 1 --configs native-warm,gasan-warm --no-sanitizer --out /tmp/o-jitab/$(basename $b)-$r | grep -E "STEADY|geomean|exit status" | sed "s|^|$(basename $b) round $r: |"; done; done ;;
    pair)    for e in ${PAIR_BINS:-$BO $B}; do b=$(realpath ${e%%@*}); o=; [ "$e" = "${e%%@*}" ] || o=${e#*@}; [ -x $b/gasan-run ] || continue; env ${o:+GASAN_OPTIONS=$o} TRITON_CACHE_DIR=$(mktemp -d /tmp/pair-triton-XXXX) timeout $lim $b/gasan-run -- python3 benches/jit/pair.py --reps ${PAIR_REPS:-300} ${PAIR_ARGS:-} 2>&1 | grep -E "^PAIR|Error|error:" | sed "s|^|$(basename $b)${o:+ $o}: |"; done ;;
    variants) chmod +x benches/diag/ptx_variant.py; rp=$(python3 -c 'import os,triton;print(os.path.join(os.path.dirname(triton.__file__),"backends/nvidia/bin/ptxas"))'); for v in ${VARIANTS:-full norange nopre nopreshared nopreglobal nopost norange,nopre,nopost}; do env GASAN_REAL_PTXAS=$PWD/benches/diag/ptx_variant.py PTX_VARIANT_PTXAS=$rp GASAN_PTX_VARIANT=${v#full} TRITON_CACHE_DIR=$(mktemp -d /tmp/var-triton-XXXX) timeout $lim $B/gasan-run -- python3 benches/jit/pair.py --reps ${PAIR_REPS:-300} --queued --only ${VARIANT_KERNELS:-attention_fwd,matmul} 2>&1 | grep -E "^PAIR |Error|error:" | sed "s|^|$v: |"; done ;;
    qprobe)  echo "== native"; timeout $lim python3 benches/jit/queue_probe.py 50 2>&1 | grep -E 'QUEUE|Error'; echo "== gasan"; timeout $lim $B/gasan-run -- python3 benches/jit/queue_probe.py 50 2>&1 | grep -E 'QUEUE|ERROR' ;;
    jitbench) timeout $lim python3 benches/jit/run.py --gasan $B/gasan-run --rounds ${JITBENCH_ROUNDS:-1} --timeout ${JITBENCH_TIMEOUT:-300} ${JITBENCH_CONFIGS:+--configs $JITBENCH_CONFIGS} --out /tmp/o-jitbench ;;
    extdiag) echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST-<unset>} (unset: load_inline adds +PTX for the GPU's arch)"; timeout $lim python3 examples/torch_extension.py 2>&1 | tail -5; echo "native (compiles the extension into torch's cache, so the gasan runs below only load it) exit status ${PIPESTATUS[0]}"; find "${TORCH_EXTENSIONS_DIR:-$HOME/.cache/torch_extensions}" -name 'gasan_example_shift_sum*.so' -exec $B/gasan-ptx extract {} \; ; for v in 1 2; do timeout $lim $B/gasan-run --verbosity $v -- python3 examples/torch_extension.py 2>&1 | grep -v "^    #" | tail -60; echo "exit status ${PIPESTATUS[0]}"; done ;;
    jitsel)  timeout $lim python3 runtime/gpu/python/run_groups.py --group jit --match "${JIT_MATCH:-.}" --jobs 4 --no-sanitizer --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 200 --out /tmp/o-jitsel ;;
    numba)   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/np-site .whl/numpy-2.*.whl && PYTHONPATH=/tmp/np-site timeout $lim python3 runtime/gpu/python/run_groups.py --group jit --match '^numba' --jobs 2 --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 200 --out /tmp/o-numba ;;
    mgpusel) timeout $lim python3 runtime/gpu/python/run_groups.py --group mgpu --match "${MGPU_MATCH:-.}" --jobs 4 --no-sanitizer --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 60 --out /tmp/o-mgpusel ;;
    mgpu)    timeout $lim python3 runtime/gpu/python/run_groups.py --group mgpu --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 240 --out /tmp/o-mgpu ;;
    mgpu8)   timeout $lim python3 runtime/gpu/python/run_groups.py --group mgpu --gasan $B/gasan-run --bin-dir $([ -d build/suite-new ] && echo build/suite-new || echo $W/suite) --timeout 240 --jobs 8 --no-sanitizer --out /tmp/o-mgpu8 ;;
    asyncdiag) for v in native gasan; do c=(); [ $v = gasan ] && c=($B/gasan-run --verbosity 2 --framework-pools 0 --); PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout $lim "${c[@]}" python3 benches/jit/triton_bench.py --reps 5 --only model > $R/asyncdiag-$v.txt 2>&1; echo "$v exit status $?"; grep -v "^    #" $R/asyncdiag-$v.txt | grep -iE "error|memory|pool|gasan" | head -40; done ;;
    drvthread) for b in $BO $B; do [ -x $b/gasan-run ] || continue; for c in thread_clean thread_overflow; do o=$(timeout 60 $b/gasan-run -- build/gpu/drvapp $c 2>&1); echo "$b $c: rc=$? $(grep -m1 -oE 'ERROR: GPUAddressSanitizer: [a-z-]*|failed: [0-9]+|result ok|WARNING.*' <<<"$o" | cut -c1-160)"; done; done ;;
    mtloop)  for b in $BO $B; do [ -x $b/gasan-run ] || continue; for v in ${MTLOOP_PTX:-default}; do declare -A n=(); for i in $(seq ${MTLOOP_N:-20}); do o=$( ([ $v = default ] || export MT_LOAD_PTX_VERSION=$v; timeout 60 $b/gasan-run --shadow-scale 8 -- build/gpu/mt_load overflow) 2>&1); k=$(grep -o "ERROR: GPUAddressSanitizer: [a-z-]*" <<<"$o" | head -1 | sed 's/.*: //'); [ -n "$k" ] || k=none; n[$k]=$(( ${n[$k]:-0} + 1 )); [ "$k" = heap-buffer-overflow ] || echo "$o" > $R/mtloop-$([ $b = $BO ] && echo old || echo new)-$v-$i.txt; done; for k in "${!n[@]}"; do echo "$b PTX $v: $k ${n[$k]}"; done; unset n; done; done ;;
    *) echo "unknown step $step" ;;
  esac > "$R/$step.txt" 2>&1
  rc=$?
  summary+=("$(printf '%-9s rc=%-4s %4ss' "$step" "$rc" "$(( $(date +%s) - t0 ))")")
  tail -40 "$R/$step.txt"
done
tar -C /tmp -czf "$R/logs.tgz" $(cd /tmp && ls -d o-* 2>/dev/null) 2>/dev/null
printf '%s\n' "${summary[@]}"
