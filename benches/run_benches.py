#!/usr/bin/env python3
"""Runs gasan's benchmarks natively, under gasan (scale 8 and 7), under compute-sanitizer memcheck,
and compute-sanitizer on a `-sanitize memcheck` build; prints ratios to native and the geometric
mean, peak device memory (native vs gasan) and gasan start-up time (cold and warm cache).

Usage (on the GPU machine): python3 benches/run_benches.py --bin-dir build/bench \
        --gasan build/bin/gasan-run [--out results.md] [--only NAME,NAME] [--no-sanitizer]
"""
import argparse, math, os, re, shutil, subprocess, sys, tempfile, threading, time

BENCH_RE = re.compile(r"BENCH name=(\S+) median_ms=([0-9.]+) reps=(\d+) checksum=(\S+)")


def parse_bench(output):
    """The (name, median_ms, checksum) of a benchmark's output, or None."""
    m = BENCH_RE.search(output)
    return (m.group(1), float(m.group(2)), m.group(4)) if m else None


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def fmt_ratio(r):
    return "—" if r is None or math.isnan(r) else f"{r:.2f}×"


class PeakMem:
    """Samples the device memory a process uses (nvidia-smi), keeping the maximum."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout
                for line in out.splitlines():
                    p, mem = [x.strip() for x in line.split(",")[:2]]
                    if p == str(self.pid):
                        self.peak = max(self.peak, int(mem))
            except Exception:
                pass
            time.sleep(0.05)

    def done(self):
        self.stop = True
        self.t.join()
        return self.peak


def run(cmd, env, timeout, measure_mem=False):
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mem = PeakMem(p.pid) if measure_mem else None
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        out += "\n[timeout]"
    peak = mem.done() if mem else None
    return p.returncode, out, time.time() - t0, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--out")
    ap.add_argument("--only")
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--gasan-options", default="", help="extra GASAN_OPTIONS for the gasan runs, e.g. hoist_loops=0")
    ap.add_argument("--timeout", type=int, default=180)
    a = ap.parse_args()

    names = sorted(f for f in os.listdir(a.bin_dir) if "." not in f)
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    have_cs = shutil.which("compute-sanitizer") is not None and not a.no_sanitizer
    cache = tempfile.mkdtemp(prefix="gasan-bench-cache-")
    base_env = dict(os.environ)
    gasan_env = {"GASAN_OPTIONS": ":".join(o for o in (f"cache_dir={cache}", a.gasan_options) if o)}
    tools = [("native", lambda b: [b], {}),
             ("gasan-s8", lambda b: [a.gasan, "--shadow-scale", "8", "--", b], gasan_env),
             ("gasan-s7", lambda b: [a.gasan, "--shadow-scale", "7", "--", b], gasan_env)]
    if have_cs:
        tools.append(("cs-memcheck", lambda b: ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "10", b], {"GASAN_BENCH_REPS": "3"}))
        tools.append(("cs-compiletime", lambda b: ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "10", b + ".csan"], {"GASAN_BENCH_REPS": "3"}))
    rows, problems = [], []
    for n in names:
        b = os.path.join(a.bin_dir, n)
        row = {"name": n}
        for tool, cmd, extra in tools:
            if tool == "cs-compiletime" and not os.path.exists(b + ".csan"):
                continue
            env = dict(base_env, **extra)
            rc, out, wall, peak = run(cmd(b), env, a.timeout, measure_mem=tool in ("native", "gasan-s8"))
            r = parse_bench(out)
            if rc != 0 or r is None:
                problems.append(f"{n} under {tool}: rc={rc}: {out.strip().splitlines()[-3:] if out.strip() else ''}")
                continue
            row[tool] = r[1]
            row[tool + ":checksum"] = r[2]
            row[tool + ":wall"] = wall
            if peak is not None:
                row[tool + ":mem"] = peak
            if tool.startswith("gasan") and "native:checksum" in row and r[2] != row["native:checksum"]:
                problems.append(f"{n} under {tool}: checksum {r[2]} != native {row['native:checksum']}")
            if tool.startswith("gasan") and "GPUAddressSanitizer" in out:
                problems.append(f"{n} under {tool}: false report")
        rows.append(row)
        print(f"{n}: " + " ".join(f"{t}={row.get(t, float('nan')):.3f}ms" for t, _, _ in tools), file=sys.stderr, flush=True)

    cols = [t for t, _, _ in tools]
    lines = ["| benchmark | native ms | " + " | ".join(f"{c} ×" for c in cols[1:]) + " | peak MiB native | peak MiB gasan |",
             "|---|---:|" + "---:|" * (len(cols) - 1) + "---:|---:|"]
    ratios = {c: [] for c in cols[1:]}
    for r in rows:
        nat = r.get("native")
        cells = []
        for c in cols[1:]:
            v = r.get(c)
            rr = v / nat if (v and nat) else None
            if rr:
                ratios[c].append(rr)
            cells.append(fmt_ratio(rr))
        lines.append(f"| {r['name']} | {nat if nat is None else f'{nat:.3f}'} | " + " | ".join(cells) +
                     f" | {r.get('native:mem', '—')} | {r.get('gasan-s8:mem', '—')} |")
    lines.append("| **geometric mean** | | " + " | ".join(f"**{fmt_ratio(geomean(ratios[c]))}**" for c in cols[1:]) + " | | |")
    worst = {c: max(ratios[c]) if ratios[c] else float('nan') for c in cols[1:]}
    lines.append("| worst | | " + " | ".join(fmt_ratio(worst[c]) for c in cols[1:]) + " | | |")

    # Start-up: a benchmark process under gasan with an empty instrumentation cache, then warm.
    start = []
    if names:
        b = os.path.join(a.bin_dir, names[0])
        cold = tempfile.mkdtemp(prefix="gasan-startup-")
        env = dict(base_env, GASAN_OPTIONS=f"cache_dir={cold}", GASAN_BENCH_REPS="1")
        t_native = run([b], dict(base_env, GASAN_BENCH_REPS="1"), a.timeout)[2]
        t1 = run([a.gasan, "--", b], env, a.timeout)[2]
        t2 = run([a.gasan, "--", b], env, a.timeout)[2]
        start = [f"Start-up ({names[0]}, 1 rep, whole process): native {t_native:.2f} s, gasan cold cache {t1:.2f} s, warm cache {t2:.2f} s."]

    report = "\n".join(lines + [""] + start + [""] + (["Problems:"] + [f"- {p}" for p in problems] if problems else ["No problems: every gasan run matched the native checksum and reported nothing."]))
    print(report)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)  # a results path in a new folder must not lose the run
        with open(a.out, "w") as f:
            f.write(report + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
