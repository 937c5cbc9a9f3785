#!/usr/bin/env bash
# Unit, property and integration tests of every crate (GPU-only tests skip with a message).
set -euo pipefail
cargo test --workspace --release --locked 2>&1
