#!/usr/bin/env bash
# Detection suite, benchmarks and GPU verification programs: every CUDA program builds with the
# pinned toolchain; every suite program has an expectation and every expectation a built program
# (at least 40 buggy programs); the runners' table logic is tested on recorded outputs (which also
# checks that each expectation's source carries exactly one matching BUG marker).
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
SUITE_ONLY_PLAIN=1 tests/build.sh "$out/suite" >/dev/null
BENCH_ONLY_PLAIN=1 benches/build.sh "$out/bench" >/dev/null
runtime/gpu/build.sh "$out/gpu" >/dev/null
n_bench=$(ls "$out/bench" | wc -l)
[ "$n_bench" -ge 12 ] || { echo "only $n_bench benchmarks built"; exit 1; }
# One program per case: every expectation's program was built, every tests/suite/*.cu is expected.
n_suite=$(python3 - "$out/suite" <<'PY'
import glob, json, os, sys
bins = sys.argv[1]
cases = json.load(open("tests/expectations.json"))["cases"]
bad = [f"{c['name']}: program {c['program']} not built" for c in cases if not os.access(os.path.join(bins, c["program"]), os.X_OK)]
expected = {os.path.normpath(os.path.join("tests", c["source"])) for c in cases}
bad += [f"{s}: no expectation" for s in sorted(glob.glob("tests/suite/*.cu")) if os.path.normpath(s) not in expected]
if len(cases) < 40:
    bad.append(f"only {len(cases)} buggy programs (want at least 40)")
print("\n".join(bad) if bad else len(cases))
sys.exit(1 if bad else 0)
PY
) || { echo "$n_suite"; exit 1; }
# README's quick start: the example builds as README says, its fatbinary holds the PTX gasan checks,
# and that PTX instruments and the checked PTX assembles (90-gpu.sh runs it under gasan-run).
examples/build.sh >/dev/null
target/release/gasan-ptx extract -o "$out/example" examples/out/overflow >/dev/null
ptx=$(ls "$out/example"/*.ptx 2>/dev/null | head -1)
[ -n "$ptx" ] || { echo "examples/out/overflow: no PTX in its fatbinary"; exit 1; }
target/release/gasan-ptx instrument -o "$out/example.checked.ptx" "$ptx" 2>/dev/null
"$(scripts/cuda-toolchain.sh)/bin/ptxas" -arch=sm_75 -o /dev/null "$out/example.checked.ptx"
echo "built: suite ($n_suite programs), $n_bench benchmarks, GPU verification cases, examples (checked PTX assembles)"
(cd tests && python3 -m unittest -v test_run_suite 2>&1)
# The runner of the JIT and multi-GPU groups (runtime/gpu/python/run_groups.py), with stand-in programs.
(cd runtime/gpu/python && python3 -m unittest -v test_run_groups 2>&1)
# gasan's Python start-up hook points JAX's XLA at gasan-ptxas (a stand-in jax._src.lib).
(cd runtime/python && python3 -m unittest -v test_sitecustomize 2>&1)
# benches/jit/pair.py (checked against native Triton kernels in one process), with stand-in modules.
(cd benches/jit && python3 -m unittest -v test_pair 2>&1)
