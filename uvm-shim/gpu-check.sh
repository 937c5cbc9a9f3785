#!/usr/bin/env bash
# GPU check for gasan-uvm: selftest of the Vmm backend at both shadow scales, IPC between processes
# (ipc-selftest), then the benchmark.
# Run at the repo root on the GPU machine with the release binary carried
# (build here: cargo build --release -p gasan-uvm; carry target/release/gasan-uvm).
# Exits non-zero if any selftest fails.
set -u
BIN=${GASAN_BIN:-target/release}
rc=0
for scale in 8 7; do
  "$BIN/gasan-uvm" selftest --backend vmm --scale "$scale" || rc=1
done
"$BIN/gasan-uvm" ipc-selftest --backend vmm || rc=1
"$BIN/gasan-uvm" bench --backend vmm --scale 8 || rc=1
exit $rc
