#!/usr/bin/env bash
# Coverage-guided fuzzing (issue 12 part 7), CPU only: builds the libFuzzer targets in fuzz/ (own
# workspace, stable toolchain, SanitizerCoverage through RUSTFLAGS: fuzz/build.sh), replays every
# committed input of fuzz/seeds/<target> (seeds and the regression inputs fuzzing found: the same
# inputs on every run), then explores for FUZZ_SECONDS (default 40) a target from them; fails on
# any crash, panic, timeout or OOM (the input is left in fuzz/artifacts/<target>/). Prints
# executions and coverage per target, then assembles every committed PTX input and a sample of
# the rewriter's corpus with ptxas before and after instrumentation.
set -euo pipefail
cd "$(dirname "$0")/../.."
fuzz/run.sh "${FUZZ_SECONDS:-40}"
fuzz/ptxas-check.sh 100
