#!/usr/bin/env bash
# CI for the Triton cases of issue 39's GPU tests, no GPU needed: compiles every kernel of
# triton_bugs.py ahead of time for sm_90a with the pinned Triton (scripts/triton.sh) through
# gasan-ptxas (the pinned CUDA ptxas as the real one), and asserts that each checked cubin carries
# gasan's marker and site table, and that the Python line each case's report must name (its
# `# BUG:<case>` marker) has a checked site of the expected access in the expected kernel, so the
# GPU run can only fail on what the runtime does with the cubin.
# Usage (repository root): runtime/gpu/python/triton_aot_check.sh   (env: GASAN_CACHE, GASAN_CUDA_ROOT)
set -euo pipefail
cd "$(dirname "$0")/../../.."
py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case $py in
  3.1[0-4]) ;;
  *) echo "SKIPPED: Triton AOT check: no pinned Triton 3.6.0 wheel for Python $py"; exit 0 ;;
esac
cuda=${GASAN_CUDA_ROOT:-$(scripts/cuda-toolchain.sh)}
site=$(scripts/triton.sh)
[ -x target/release/gasan-ptxas ] || cargo build --release --locked -p gasan-ptxas 2>&1 | tail -1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" TRITON_CACHE_DIR="$tmp/triton-cache" TRITON_HOME="$tmp/triton-home" \
  TRITON_PTXAS_PATH="$PWD/target/release/gasan-ptxas" GASAN_REAL_PTXAS="$cuda/bin/ptxas" GASAN_OPTIONS="cache_dir=$tmp/gasan-cache" \
  python3 runtime/gpu/python/triton_bugs.py --aot "$tmp/checked" >/dev/null
python3 - "$tmp/checked" <<'PY'
import json, os, sys
sys.path[:0] = ["jit/triton", "runtime/gpu/python"]
import check, run_groups
out = sys.argv[1]
sites = {}   # (kernel, line) -> {access kinds}
for f in sorted(os.listdir(out)):
    if not f.endswith(".cubin"):
        continue
    cubin = os.path.join(out, f)
    assert check.marker(cubin) is not None, f"{f}: no gasan marker (not compiled through gasan-ptxas)"
    tables = check.tables(cubin)
    assert tables is not None, f"{f}: no site table"
    for s in tables[1]["sites"]:
        if s.get("loc") and s["loc"]["file"].endswith("triton_bugs.py"):
            sites.setdefault((s["kernel"], s["loc"]["line"]), set()).add(s["kind"])
rows = [c for c in run_groups.load_cases("jit", "/nonexistent", "python3") if c.get("source") == "triton_bugs.py"]
bad = []
for c in rows:
    lines = [c["line"]] if c["line"] else [l for (k, l) in sites if k == c["kernel"]]
    kinds = set().union(*[sites.get((c["kernel"], l), set()) for l in lines])
    if c["access"] not in kinds:
        bad.append(f"{c['name']}: no checked {c['access']} site of kernel {c['kernel']} at triton_bugs.py:{c['line'] or 'any'} (found {sorted(kinds) or 'none'})")
    else:
        print(f"{c['name']:<24} {c['kernel']:<22} triton_bugs.py:{c['line'] or 'any':<4} checked {c['access']}")
if bad:
    sys.exit("FAILED:\n  " + "\n  ".join(bad))
print(f"ok: {len(rows)} Triton bug cases have a checked site at the line their report must name")
PY
