#!/usr/bin/env bash
# (GPU machine, repository root; gasan binaries in build/bin.) Used for runtime/results.md, H100 2026-12-05.
B=$(realpath build/bin); R=${OUT:-/tmp/r}; mkdir -p $R/xd
for s in 1 64 1024; do echo "== gasan shift $s"; timeout 60 $B/gasan-run --verbosity 1 -- python3 benches/diag/jax/pallas_past_end.py $s 2>&1 | grep -v "^I1\|^W1" | grep -E "shift|ERROR|heap|SUMMARY|modules:|JIT-compiled|untracked|#0|WARNING" | head -12; done
echo "== dump"; XLA_FLAGS=--xla_dump_to=$R/xd timeout 60 $B/gasan-run -- python3 benches/diag/jax/pallas_past_end.py 1 2>&1 | tail -3
mkdir -p $R/ptx; cp $R/xd/*.ptx $R/ptx/ 2>/dev/null; ls $R/xd | grep -ci ptx; rm -rf $R/xd; 
echo "== cs"; timeout 150 compute-sanitizer --print-limit 3 python3 benches/diag/jax/pallas_past_end.py 1 2>&1 | grep -v "^I1\|^W1" | head -30
