#!/usr/bin/env bash
# Interleaved rounds (ROUNDS, default 12) of loadexp over the cubins benches/diag/build.sh wrote,
# lazy and eager module loading, each run a fresh process; prints the median µs per cubin.
# Usage (GPU machine): benches/diag/run.sh DIR
set -euo pipefail
cd "${1:?usage: run.sh DIR}"
K0=_Z4kernILi0EEvPfPKfi; K1=_Z4kernILi1EEvPfPKfi
files=${FILES:-$(ls *.cubin)}
# After the first two, the mean get+load over 60 more kernels (a first launch's per-kernel part).
more=("_Z4kernILi%dEEvPfPKfi" 60)
for f in $files; do ./loadexp "$f" $K0 $K1 "${more[@]}" >/dev/null; done
log=$(mktemp)
for mode in LAZY EAGER; do
  for _ in $(seq "${ROUNDS:-12}"); do for f in $files; do CUDA_MODULE_LOADING=$mode ./loadexp "$f" $K0 $K1 "${more[@]}" | sed "s/^/$mode /"; done; done
done > "$log"
python3 - "$log" <<'PY'
import re, statistics, collections, sys
v = collections.defaultdict(list)
for l in open(sys.argv[1]):
    mode, f = l.split()[0], re.search(r"file=(\S+)", l).group(1)
    v[(mode, f)].append([float(x) for x in re.findall(r"_us=([\d.]+)", l)])
print(f"{'mode':6} {'file':22} {'load':>8} {'getfn':>8} {'funcload':>9} {'2nd fn':>8} {'per fn':>8}  (median us)")
for (mode, f), rows in v.items():
    print(f"{mode:6} {f:22} " + " ".join(f"{statistics.median(c):8.1f}" for c in zip(*rows)))
PY
