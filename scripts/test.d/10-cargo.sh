#!/usr/bin/env bash
# Unit, property and integration tests of every crate (GPU-only tests skip with a message).
# The release build first: the interposition test preloads the built libgasan_runtime.so.
set -euo pipefail
cargo build --workspace --release --locked 2>&1
GASAN_TEST_STRICT=1 cargo test --workspace --release --locked 2>&1
