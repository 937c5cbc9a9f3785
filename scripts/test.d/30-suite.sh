#!/usr/bin/env bash
# Detection suite, benchmarks and GPU verification programs: every CUDA program builds with the
# pinned toolchain; expectations parse and name existing cases and BUG markers; the runners' table
# logic is tested on recorded outputs.
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
SUITE_ONLY_PLAIN=1 tests/build.sh "$out/suite" >/dev/null
BENCH_ONLY_PLAIN=1 benches/build.sh "$out/bench" >/dev/null
runtime/gpu/build.sh "$out/gpu" >/dev/null
n_bench=$(ls "$out/bench" | wc -l)
[ "$n_bench" -ge 12 ] || { echo "only $n_bench benchmarks built"; exit 1; }
# The suite binary lists exactly the cases the expectations name.
diff <("$out/suite/suite" --list | sort) <(python3 -c "import json; print('\n'.join(sorted(c['name'] for c in json.load(open('tests/expectations.json'))['cases'])))")
echo "built: suite ($("$out/suite/suite" --list | wc -l) cases), $n_bench benchmarks, GPU verification cases"
cd tests && python3 -m unittest -v test_run_suite 2>&1
