#!/usr/bin/env bash
# Unit, property and integration tests of every crate. A test whose prerequisite is missing prints a
# line starting with `skipped` and returns; scripts/cargo-skips.py turns those into `SKIPPED:` lines
# for the summary of scripts/test.sh (--show-output lets it see them; it drops the rest of the
# passing tests' output).
# The release build first: the interposition test preloads the built libgasan_runtime.so.
# libclang (for the bindgen check of the kmod ABI) is unpacked from Debian's package, no root.
set -euo pipefail
LIBCLANG_PATH=$(scripts/libclang.sh)
export LIBCLANG_PATH LD_LIBRARY_PATH="$LIBCLANG_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --workspace --release --locked 2>&1
GASAN_TEST_STRICT=1 cargo test --workspace --release --locked -- --show-output 2>&1 | python3 scripts/cargo-skips.py
# Lints are part of the tests: formatting (rustfmt.toml; the fuzz workspace too) and clippy with
# warnings as errors over every target.
cargo fmt --all -- --check 2>&1
(cd fuzz && cargo fmt -- --check) 2>&1
cargo clippy --workspace --all-targets --release --locked -- -D warnings 2>&1
