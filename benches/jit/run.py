#!/usr/bin/env python3
"""Triton and torch.compile under gasan (issue 39's benchmark): runs triton_bench.py natively,
under gasan-run and under compute-sanitizer, each in fresh processes, and prints one table of
steady-state kernel times and whole-program figures (first launches with empty caches and with warm
ones, torch.compile's compile and step times), with gasan/native ratios and geomeans.

Configurations (each a fresh process):
    native-cold   empty Triton and Inductor caches        native-warm   the same caches again
    gasan-cold    empty caches and an empty gasan cache   gasan-warm    the same caches again
    native-nocache  warm, PYTORCH_NO_CUDA_MEMORY_CACHING=1 (what framework_pools=1 sets where the
                    user configured PyTorch's allocator: the allocator's share of gasan's cost)
    gasan-pools0  warm, framework_pools=0 (PyTorch's caching allocator kept: no per-tensor checks)
    native-async  warm, PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (what framework_pools=1
                  sets by default: every tensor its own stream-ordered allocation)
    gasan-async   warm, framework_pools=0 with that backend (gasan-warm's PyTorch allocation
                  without the other frameworks' switches)
    cs            compute-sanitizer memcheck, warm native caches (fewer reps)

Cold configurations run first, once each; the warm ones then run --rounds times, interleaved (one
round of every configuration, then the next), after an unmeasured run that fills their caches
where their cold run is not in the plan. Medians (the lower of an even count); every round's
whole-program times are printed too.

Usage (GPU machine): python3 benches/jit/run.py --gasan build/bin/gasan-run [--rounds N] [--no-sanitizer] [--out DIR]
"""

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "triton_bench.py")
ASYNC = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
LINE = re.compile(r"^(FIRST|STEADY|COMPILE|STEP|TOTAL) (\S+)(?: (\S+))?$")


def run(cmd, env, timeout, log):
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
    wall = time.perf_counter() - t
    with open(log, "w") as f:
        f.write("$ %s\n%s" % (" ".join(cmd), out))
    vals = {}
    for line in out.splitlines():
        m = LINE.match(line.strip())
        if m:
            key = m.group(1) if m.group(1) == "TOTAL" else "%s %s" % (m.group(1), m.group(2))
            vals[key] = float(m.group(3) if m.group(3) is not None else m.group(2))
    vals["wall"] = wall
    return rc, vals


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=1, help="warm runs of each configuration (medians)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--configs", default="", help="comma-separated subset of the configurations (default: all)")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="gasan-jitbench-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    gasan = os.path.abspath(a.gasan)
    base = dict(os.environ)
    for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "GASAN_OPTIONS"):
        base.pop(k, None)
    scratch = tempfile.mkdtemp(prefix="jitbench-caches-", dir=a.out)

    def env_for(tag, extra=None):
        e = dict(base, TRITON_CACHE_DIR=os.path.join(scratch, tag, "triton"), TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, tag, "inductor"))
        e.update(extra or {})
        return e

    py = [a.python, BENCH, "--reps", str(a.reps)]
    gcache = os.path.join(scratch, "gasan")
    g = [gasan, "--cache-dir", gcache, "--"]
    plan = [("native-cold", py, env_for("native"), 1), ("native-warm", py, env_for("native"), a.rounds),
            ("gasan-cold", g + py, env_for("gasan"), 1), ("gasan-warm", g + py, env_for("gasan"), a.rounds),
            ("native-nocache", py, env_for("native", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}), a.rounds),
            ("gasan-pools0", [gasan, "--cache-dir", gcache, "--framework-pools", "0", "--"] + py, env_for("gasan"), a.rounds),
            ("native-async", py, env_for("native", ASYNC), a.rounds),
            ("gasan-async", [gasan, "--cache-dir", gcache, "--framework-pools", "0", "--"] + py, env_for("gasan", ASYNC), a.rounds)]
    cs = shutil.which("compute-sanitizer")
    if cs and not a.no_sanitizer:
        plan.append(("cs", [cs, "--tool", "memcheck", "--print-limit", "1"] + py[:2] + ["--reps", "5", "--no-model"], env_for("native"), 1))
    if a.configs:
        want = a.configs.split(",")
        unknown = sorted(set(want) - {n for n, *_ in plan} - {"cs"})
        if unknown:
            ap.error("unknown configuration(s): " + ", ".join(unknown))
        plan = [p for p in plan if p[0] in want]
    results, status = {}, {}
    samples = {name: [] for name, *_ in plan}

    def measure(name, cmd, env, r):
        rc, vals = run(cmd, env, a.timeout, os.path.join(a.out, "%s.%d.log" % (name, r)))
        status[name] = rc
        samples[name].append(vals)
        print("%-15s round %d rc=%d wall %.1fs" % (name, r, rc, vals["wall"]), flush=True)

    # Cold runs first, on empty caches; then one unmeasured run fills the caches of any warm
    # configuration whose cold twin is not in the plan (else its first round would be cold); then
    # the warm rounds interleaved, so that a drift of the machine falls on every configuration alike.
    filled = set()
    for name, cmd, env, rounds in plan:
        if name.endswith("-cold"):
            measure(name, cmd, env, 0)
            filled.add(env["TRITON_CACHE_DIR"])
    for name, cmd, env, rounds in plan:
        if not name.endswith("-cold") and name != "cs" and env["TRITON_CACHE_DIR"] not in filled:
            run(cmd, env, a.timeout, os.path.join(a.out, "%s.fill.log" % name))
            filled.add(env["TRITON_CACHE_DIR"])
            print("%-15s filled its caches (not measured)" % name, flush=True)
    for r in range(max(rounds for *_, rounds in plan)):
        for name, cmd, env, rounds in plan:
            if not name.endswith("-cold") and r < rounds:
                measure(name, cmd, env, r)
    for name, runs in samples.items():
        keys = set().union(*runs)
        results[name] = {k: sorted(v[k] for v in runs if k in v)[(len([v for v in runs if k in v]) - 1) // 2] for k in keys}
    cols = [n for n, *_ in plan]
    keys = sorted({k for r in results.values() for k in r}, key=lambda k: (k.split(" ")[0] != "STEADY", k))
    unit = {"FIRST": "s", "STEADY": "µs", "COMPILE": "s", "STEP": "ms", "TOTAL": "s", "wall": "s"}
    lines = ["| measure | " + " | ".join(cols) + " | gasan/native warm |", "|---|" + "---|" * (len(cols) + 1)]
    ratios = []
    for k in keys:
        u = unit[k.split(" ")[0]]
        row = [("%.3g" % results[c][k]) if k in results[c] else "—" for c in cols]
        nat, gas = results.get("native-warm", {}).get(k), results.get("gasan-warm", {}).get(k)
        ratio = gas / nat if nat and gas else None
        if ratio and k.startswith("STEADY"):
            ratios.append(ratio)
        lines.append("| %s (%s) | %s | %s |" % (k, u, " | ".join(row), "%.2f×" % ratio if ratio else "—"))
    print("\nexit status: " + ", ".join("%s %d" % (n, status[n]) for n in cols))
    print("\n".join(lines))
    print("\nsteady-state geomean gasan/native (warm): %.3f× over %d kernels" % (geomean(ratios), len(ratios)))
    if "cs" in results:
        cr = [results["cs"][k] / results["native-warm"][k] for k in results["cs"] if k.startswith("STEADY") and results.get("native-warm", {}).get(k)]
        print("steady-state geomean compute-sanitizer/native: %.3f× over %d kernels" % (geomean(cr), len(cr)))
    for w in ("TOTAL", "wall"):
        each = ["%s %s" % (n, "/".join("%.2f" % v[w] for v in samples[n] if w in v)) for n in cols if any(w in v for v in samples[n])]
        print("%s each round (s): %s" % (w, "; ".join(each)))
    for w in ("TOTAL", "wall"):
        n, gw = results.get("native-warm", {}).get(w), results.get("gasan-warm", {}).get(w)
        if n and gw:
            print("whole program (%s) warm: native %.2fs, gasan %.2fs (%.2f×); cold: native %.2fs, gasan %.2fs" % (w, n, gw, gw / n, results.get("native-cold", {}).get(w, float("nan")), results.get("gasan-cold", {}).get(w, float("nan"))))
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if any(v not in (0,) for k, v in status.items() if k != "cs") else 0


if __name__ == "__main__":
    sys.exit(main())
