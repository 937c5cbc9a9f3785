#!/usr/bin/env python3
"""Whole-program benchmarks: what a user pays for a short program under gasan, first launches
included (benches/startup, built by benches/build.sh into build/startup).

Configurations, in the same run:
  native       the program alone
  gasan-cold   gasan-run with an empty gasan cache (instrument + ptxas compile of every module)
  gasan-warm   gasan-run with the cache filled by an earlier run (cubins loaded as they are)
  gasan-ptx    gasan-run with sass=0: checked PTX to the driver's JIT (its own JIT cache warm)
               -- gasan before the cubin cache
  cs-memcheck  compute-sanitizer --tool memcheck (skipped with --no-sanitizer or when absent)

Measurements:
  (a) process start -> first kernel done (startup1: one kernel; kernels100: a 100-kernel module)
  (b) first launch of 1, 10 and 100 distinct kernels of one module (kernels100 b N): host time of
      launching and waiting for each once, minus the same launches again
  (c) the short programs: whole process wall time (SHORT_REPS=0), the first run of the GPU region
      (host time, first launches included) and its steady state (median of SHORT_REPS=10 later runs,
      CUDA events); geometric means of each over native, separately

Usage (on the GPU machine):
  python3 benches/run_startup.py --bin-dir build/startup --gasan build/bin/gasan-run \
      [--ptxas PATH] [--repeat 3] [--out results.md] [--only gemm,atax] [--no-sanitizer]
"""
import argparse, math, os, re, shutil, statistics, subprocess, sys, tempfile, time

SHORT_RE = re.compile(r"SHORT name=(\S+) first_ms=([-0-9.naninf]+) steady_ms=([-0-9.naninf]+) reps=(\d+) checksum=(\S+)")
START_RE = re.compile(r"STARTUP first_kernel_unix=([0-9.]+)")
FIRST_RE = re.compile(r"FIRST n=(\d+) first_us=([0-9.]+) again_us=([0-9.]+) checksum=(\S+)")
CUBINS_RE = re.compile(r"cubins: (\d+) from cache(?: \(\d+ found before their load\))?, (\d+) compiled \(([0-9.]+) ms in ptxas\), (\d+) refused by the driver; (\d+) modules on the driver's PTX JIT")
SHORT_PROGRAMS = ["gemm", "mm2", "atax", "mvt", "jacobi2d", "fdtd2d", "reduce", "scan", "histogram", "transpose_add", "managed"]


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and not math.isnan(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def ratio(v, base):
    return v / base if v and base and not math.isnan(v) and not math.isnan(base) else float("nan")


def fx(r):
    return "—" if r is None or math.isnan(r) else f"{r:.2f}×"


def fnum(v, digits=2):
    return "—" if v is None or math.isnan(v) else f"{v:.{digits}f}"


class Runner:
    def __init__(self, a):
        self.a = a
        self.problems = []
        self.base_env = dict(os.environ)
        self.base_env.pop("GASAN_OPTIONS", None)
        self.warm = tempfile.mkdtemp(prefix="gasan-startup-warm-")
        self.cs = None if a.no_sanitizer else (a.compute_sanitizer or shutil.which("compute-sanitizer"))
        self.tools = ["native", "gasan-cold", "gasan-warm", "gasan-ptx"] + (["cs-memcheck"] if self.cs else [])
        self.warm_runs = []  # cubin counters of every warm run

    def gasan_opts(self, cache, extra=""):
        o = [f"cache_dir={cache}"]
        if self.a.ptxas:
            o.append(f"ptxas={self.a.ptxas}")
        if self.a.gasan_options:
            o.append(self.a.gasan_options)
        if extra:
            o.append(extra)
        return ":".join(o)

    def cmd_env(self, tool, argv, env):
        """The command line and environment of `argv` under `tool` (a fresh cache for gasan-cold)."""
        env = dict(self.base_env, **env)
        if tool == "native":
            return argv, env
        if tool == "cs-memcheck":
            return [self.cs, "--tool", "memcheck", "--print-limit", "10"] + argv, env
        if tool == "gasan-cold":
            cache = tempfile.mkdtemp(prefix="gasan-startup-cold-")
            env["GASAN_OPTIONS"] = self.gasan_opts(cache, "verbosity=1")
        elif tool == "gasan-warm":
            env["GASAN_OPTIONS"] = self.gasan_opts(self.warm, "verbosity=1")
        else:  # gasan-ptx
            env["GASAN_OPTIONS"] = self.gasan_opts(self.warm, "sass=0")
        return [self.a.gasan, "--"] + argv, env

    def run(self, tool, argv, env=None):
        """(wall seconds, output, spawn time) of one run; problems recorded."""
        cmd, env = self.cmd_env(tool, argv, env or {})
        t0 = time.time()
        t = time.monotonic()
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=self.a.timeout)
            out, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or "") if isinstance(e.stdout, str) else "", "timeout"
        wall = time.monotonic() - t
        name = " ".join(os.path.basename(x) for x in argv)
        if rc != 0:
            self.problems.append(f"{name} under {tool}: rc={rc}: {out.strip().splitlines()[-3:] if out.strip() else ''}")
        if tool.startswith("gasan") and "GPUAddressSanitizer" in out:
            self.problems.append(f"{name} under {tool}: false report")
        if tool == "gasan-warm":
            m = CUBINS_RE.search(out)
            if m:
                self.warm_runs.append((name, int(m.group(1)), int(m.group(2)), int(m.group(4)), int(m.group(5))))
        if tool == "gasan-cold" and "cubins:" in out and self.a.verbose:
            print(f"  {name} cold: {CUBINS_RE.search(out).group(0) if CUBINS_RE.search(out) else ''}", file=sys.stderr)
        return wall, out, t0

    def prime(self, argv, env=None):
        """Fills the warm gasan cache and the driver's JIT cache (gasan-ptx) for `argv`."""
        for extra in ("", "sass=0"):
            e = dict(self.base_env, **(env or {}), GASAN_OPTIONS=self.gasan_opts(self.warm, extra))
            subprocess.run([self.a.gasan, "--"] + argv, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=self.a.timeout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--ptxas", help="ptxas for gasan (default: gasan's own search: CUDA_HOME, /usr/local/cuda, PATH)")
    ap.add_argument("--compute-sanitizer", help="compute-sanitizer binary (default: from PATH)")
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--gasan-options", default="", help="extra GASAN_OPTIONS for every gasan run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median); compute-sanitizer runs once")
    ap.add_argument("--steady-reps", type=int, default=10)
    ap.add_argument("--only", help="comma-separated short programs")
    ap.add_argument("--out")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    r = Runner(a)
    b = lambda n: os.path.join(a.bin_dir, n)
    reps = lambda tool: 1 if tool == "cs-memcheck" else a.repeat
    lines = [f"Tools: {', '.join(r.tools)}; {a.repeat} runs per cell (median), compute-sanitizer 1.", ""]

    # (a) process start -> first kernel done.
    lines += ["### (a) process start → first kernel done (ms; whole process in brackets)", "",
              "| program | " + " | ".join(r.tools) + " |", "|---|" + "---:|" * len(r.tools)]
    for prog in ["startup1", "kernels100"]:
        r.prime([b(prog), "a"])
        cells = []
        for tool in r.tools:
            first, whole = [], []
            for _ in range(reps(tool)):
                wall, out, t0 = r.run(tool, [b(prog), "a"])
                m = START_RE.search(out)
                if m:
                    first.append((float(m.group(1)) - t0) * 1e3)
                    whole.append(wall * 1e3)
            cells.append(f"{fnum(statistics.median(first), 0)} [{fnum(statistics.median(whole), 0)}]" if first else "—")
        lines.append(f"| {prog} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)

    # (b) first launches of N distinct kernels of one module.
    lines += ["", "### (b) first launch of N distinct kernels of one 100-kernel module (µs: first pass − second pass)", "",
              "| N | " + " | ".join(r.tools) + " |", "|---:|" + "---:|" * len(r.tools)]
    r.prime([b("kernels100"), "b", "100"])
    for n in (1, 10, 100):
        cells = []
        for tool in r.tools:
            extra = []
            for _ in range(reps(tool)):
                _, out, _ = r.run(tool, [b("kernels100"), "b", str(n)])
                m = FIRST_RE.search(out)
                if m:
                    extra.append(float(m.group(2)) - float(m.group(3)))
            cells.append(fnum(statistics.median(extra), 0) if extra else "—")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)

    # (c) short programs.
    progs = [p for p in SHORT_PROGRAMS if not a.only or p in a.only.split(",")]
    rows = {}
    for prog in progs:
        r.prime([b(prog)])
        row = {}
        for tool in r.tools:
            walls, firsts, sums = [], [], []
            for _ in range(reps(tool)):
                wall, out, _ = r.run(tool, [b(prog)])
                m = SHORT_RE.search(out)
                if m:
                    walls.append(wall * 1e3)
                    firsts.append(float(m.group(2)))
                    sums.append(m.group(5))
            steady_env = {"SHORT_REPS": str(3 if tool == "cs-memcheck" else a.steady_reps)}
            _, out, _ = r.run("gasan-warm" if tool == "gasan-cold" else tool, [b(prog)], steady_env)
            m = SHORT_RE.search(out)
            row[tool] = {
                "whole": statistics.median(walls) if walls else float("nan"),
                "first": statistics.median(firsts) if firsts else float("nan"),
                "steady": float(m.group(3)) if m else float("nan"),
                "sum": sums[0] if sums else None,
            }
            if tool != "native" and sums and row["native"]["sum"] and sums[0] != row["native"]["sum"]:
                r.problems.append(f"{prog} under {tool}: checksum {sums[0]} != native {row['native']['sum']}")
        rows[prog] = row
        print(f"{prog}: " + " ".join(f"{t}={row[t]['whole']:.0f}ms" for t in r.tools), file=sys.stderr, flush=True)

    others = r.tools[1:]
    for what, title in [("whole", "whole program (process wall time)"), ("first", "first run of the GPU region (first launches included)"), ("steady", "steady state (median GPU region, warm)")]:
        lines += ["", f"### (c) {title}: native ms, others × native", "",
                  "| program | native ms | " + " | ".join(f"{t} ×" for t in others) + " |", "|---|---:|" + "---:|" * len(others)]
        gm = {t: [] for t in others}
        for prog, row in rows.items():
            nat = row["native"][what]
            cells = []
            for t in others:
                x = ratio(row[t][what], nat)
                gm[t].append(x)
                cells.append(fx(x))
            lines.append(f"| {prog} | {fnum(nat)} | " + " | ".join(cells) + " |")
        lines.append("| **geometric mean** | | " + " | ".join(f"**{fx(geomean(gm[t]))}**" for t in others) + " |")

    compiled_warm = sum(w[2] for w in r.warm_runs)
    lines += ["", f"Warm gasan runs: {len(r.warm_runs)}; cubins from cache {sum(w[1] for w in r.warm_runs)}, compiled {compiled_warm}, "
              f"refused {sum(w[3] for w in r.warm_runs)}, modules on the PTX JIT {sum(w[4] for w in r.warm_runs)}"
              + (" — a second run compiles nothing." if compiled_warm == 0 and r.warm_runs else ".")]
    lines += [""] + (["Problems:"] + [f"- {p}" for p in r.problems] if r.problems else ["No problems: every run exited 0, matched the native checksum and reported nothing."])
    report = "\n".join(lines)
    print(report)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)  # a results path in a new folder must not lose the run
        with open(a.out, "w") as f:
            f.write(report + "\n")
    return 1 if r.problems else 0


if __name__ == "__main__":
    sys.exit(main())
