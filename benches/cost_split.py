#!/usr/bin/env python3
"""Where gasan's costs come from, on the whole-program benchmarks (benches/startup, built by
benches/build.sh into build/startup). Prints two tables:

  steady   median CUDA-event ms of the GPU region (3 processes x SHORT_REPS=20, warm cache) under
           native, gasan, and gasan with one part switched off: --arg-bounds 0 (no bounds in launch
           arguments), --instrument 0 (pool, redzones and tags only), --tags 0, --hoist-loops 0, and
           --shadow-scale 7
  first    first launch of N distinct kernels of kernels100 (first pass - second pass, median of --reps rounds, interleaved),
           lazy and eager module loading (CUDA_MODULE_LOADING=EAGER), native, gasan, --prefetch 0, --preload 0,
           --tags 0 and --instrument 0

Usage (on the GPU machine):
  python3 benches/cost_split.py --gasan build/bin/gasan-run --bin-dir build/startup [--only steady|first] [--diag]
"""
import argparse, os, re, statistics, subprocess, tempfile

STEADY = ["gemm", "mm2", "atax", "mvt", "jacobi2d", "scan", "fdtd2d", "transpose_add"]
STEADY_CFGS = [("native", None), ("gasan", []), ("argb0", ["--arg-bounds", "0"]), ("instr0", ["--instrument", "0"]), ("tags0", ["--tags", "0"]),
               ("hoist0", ["--hoist-loops", "0"]), ("s7", ["--shadow-scale", "7"])]
EAGER = {"CUDA_MODULE_LOADING": "EAGER"}
FIRST_CFGS = [("native", None, {}), ("gasan", [], {}), ("prefetch0", ["--prefetch", "0"], {}), ("preload0", ["--preload", "0"], {}), ("tags0", ["--tags", "0"], {}),
              ("instr0", ["--instrument", "0"], {}),
              ("native-eager", None, EAGER), ("gasan-eager", [], EAGER), ("instr0-eager", ["--instrument", "0"], EAGER)]
# What of gasan's set-up (not its checks) a lazy first launch pays for: the pool's VA size, the alias
# windows of tags, and managed/host memory from the pool, each with instrumentation off.
GIB = str(1 << 30)
DIAG_CFGS = [("instr0-pool1g", ["--instrument", "0", "--pool-size", GIB], {}),
             ("instr0-tags0", ["--instrument", "0", "--tags", "0"], {}),
             ("instr0-nomh", ["--instrument", "0", "--managed-memory", "0", "--host-memory", "0"], {}),
             ("instr0-bare", ["--instrument", "0", "--tags", "0", "--managed-memory", "0", "--host-memory", "0", "--pool-size", GIB], {}),
             ("gasan-pool1g", ["--pool-size", GIB], {})]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--only", choices=["steady", "first"])
    ap.add_argument("--diag", action="store_true", help="first launches under the set-up variants too (DIAG_CFGS)")
    ap.add_argument("--cfgs", help="configurations to run, comma-separated names (default all)")
    ap.add_argument("--reps", type=int, default=5, help="rounds of first-launch runs (default 5)")
    ap.add_argument("--old", help="another build's gasan-run, run as configuration 'old' beside the others (an A/B in one run)")
    a = ap.parse_args()
    gasan, bins = os.path.realpath(a.gasan), a.bin_dir
    cache = tempfile.mkdtemp(prefix="gasan-cost-")
    old = [("old", [], {})] if a.old else []
    # The build each configuration runs, with its own cache: gasan's, and --old's as "old" (its
    # cubins are keyed by its own revision anyway).
    builds = {"old": (os.path.realpath(a.old), cache + "-old")} if a.old else {}
    chosen = lambda name: not a.cfgs or name in a.cfgs.split(",")
    steady_cfgs = [(c, o) for c, o in STEADY_CFGS + [(c, o) for c, o, _ in old] if chosen(c)]
    failures = 0

    def run(cfg, opts, prog, args, env=None):
        nonlocal failures
        exe, c = builds.get(cfg, (gasan, cache))
        cmd = ([exe, "--cache-dir", c] + opts + ["--"] if opts is not None else []) + [os.path.join(bins, prog)] + args
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=300)
        if p.returncode != 0:
            failures += 1
            print(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-800:]}")
            return None
        return p.stdout

    def median(cfg, opts, prog, args, env, pattern, reps):
        run(cfg, opts, prog, args, env)  # fills the cache (and the driver's)
        vals = []
        for _ in range(reps):
            m = re.search(pattern, run(cfg, opts, prog, args, env) or "")
            if m:
                vals.append(float(m.group(1)) - (float(m.group(2)) if m.lastindex == 2 else 0.0))
        return statistics.median(vals) if vals else float("nan")

    if a.only in (None, "steady"):
        print("steady ms (median of 3 processes x SHORT_REPS=20):")
        print(f"{'prog':<14}" + "".join(f"{c:>10}" for c, _ in steady_cfgs))
        for p in STEADY:
            row = [median(c, o, p, [], {"SHORT_REPS": "20"}, r"steady_ms=([\d.]+)", 3) for c, o in steady_cfgs]
            print(f"{p:<14}" + "".join(f"{x:>10.4f}" for x in row), flush=True)
    if a.only in (None, "first"):
        # Interleaved: each round runs every configuration once, so a drift of the machine (clocks,
        # other tenants) moves all of them alike instead of whichever ran during it.
        cfgs = [c for c in FIRST_CFGS + (DIAG_CFGS if a.diag else []) + old if chosen(c[0])]
        ns = ("1", "10", "100")
        pattern = r"first_us=([\d.]+) again_us=([\d.]+)"
        for c, o, e in cfgs:
            for n in ns:
                run(c, o, "kernels100", ["b", n], e)  # fills the cache (and the driver's)
        vals = {(c, n): [] for c, _, _ in cfgs for n in ns}
        for _ in range(a.reps):
            for c, o, e in cfgs:
                for n in ns:
                    m = re.search(pattern, run(c, o, "kernels100", ["b", n], e) or "")
                    if m:
                        vals[(c, n)].append(float(m.group(1)) - float(m.group(2)))
        print(f"first launch us (first pass - second pass), median of {a.reps} interleaved rounds [quartiles of N=1]:")
        print(f"{'cfg':<14}{'N=1':>10}{'N=10':>10}{'N=100':>10}   N=1 q1..q3")
        for c, _, _ in cfgs:
            row = [statistics.median(vals[(c, n)]) if vals[(c, n)] else float("nan") for n in ns]
            q = statistics.quantiles(vals[(c, "1")], n=4) if len(vals[(c, "1")]) >= 2 else [float("nan")] * 3
            print(f"{c:<14}" + "".join(f"{x:>10.0f}" for x in row) + f"   {q[0]:.0f}..{q[2]:.0f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
