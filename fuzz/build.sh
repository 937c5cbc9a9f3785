#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer and SanitizerCoverage on the stable toolchain: no
# cargo-fuzz and no -Zsanitizer, the same coverage passes cargo-fuzz asks rustc for (inline 8-bit
# counters, PC table, compare tracing for libFuzzer's value profile and CMP hints). `--target` keeps
# RUSTFLAGS off build scripts and proc macros (they would not link without libFuzzer).
# Prints the directory of the built binaries. Usage: fuzz/build.sh [cargo build args...]
set -euo pipefail
cd "$(dirname "$0")"
host=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
-Ccodegen-units=16 -Cforce-frame-pointers=yes"
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
cargo build --release --locked --target "$host" --bins "$@" >&2
echo "$PWD/target/$host/release"
