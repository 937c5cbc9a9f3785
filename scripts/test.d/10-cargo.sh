#!/usr/bin/env bash
# Unit, property and integration tests of every crate (GPU-only tests skip with a message).
# The release build first: the interposition test preloads the built libgasan_runtime.so.
# libclang (for the bindgen check of the kmod ABI) is unpacked from Debian's package, no root.
set -euo pipefail
LIBCLANG_PATH=$(scripts/libclang.sh)
export LIBCLANG_PATH LD_LIBRARY_PATH="$LIBCLANG_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --workspace --release --locked 2>&1
GASAN_TEST_STRICT=1 cargo test --workspace --release --locked 2>&1
