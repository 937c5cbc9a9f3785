#!/usr/bin/env python3
"""Runs clean programs under gasan many at once on one GPU, for several rounds, and checks that
every run behaves exactly as the program does natively: exit code 0, the same stdout (a
benchmark's `BENCH ... checksum=X` line compared by its checksum, timings differ), and no gasan
report on stderr. A gasan warning fails a concurrent run unless the program's solo run under gasan
(one process, before the concurrent rounds) prints the same warning: a module gasan cannot check
(static NCCL's prelinked RDC fatbin) warns alone as well, while a warning that only company brings
is what this check is for; the solo warnings are listed. Used by scripts/gpu-stress.sh (many
processes at once).

Usage: concurrent_check.py --gasan PATH --jobs 16 --rounds 5 --label NAME -- PROG[:ARG] ...
"""
import argparse, re, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor

BENCH_RE = re.compile(r"^BENCH name=(\S+) .*checksum=(\S+)", re.M)


def normalize(stdout):
    """What must match native: the whole stdout, or a benchmark's name and checksum."""
    bench = BENCH_RE.findall(stdout)
    return repr(bench) if bench else stdout


def gasan_lines(stderr):
    """gasan's lines on stderr, addresses blanked (a warning names the same thing at another address)."""
    return {re.sub(r"0x[0-9a-f]+", "0x_", l) for l in stderr.splitlines() if "==gasan==" in l or "GPUAddressSanitizer" in l}


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--label", default="programs")
    ap.add_argument("programs", nargs="+", help="PROG or PROG:ARG")
    a = ap.parse_args()
    cmds = [p.split(":", 1) for p in a.programs]
    # Native reference, also JOBS at once.
    with ThreadPoolExecutor(a.jobs) as ex:
        ref = list(ex.map(lambda c: run(c, a.timeout), cmds))
    usable = [(c, r) for c, r in zip(cmds, ref) if r[0] == 0]
    for c, r in zip(cmds, ref):
        if r[0] != 0:
            print(f"  SKIPPED: concurrent run of {' '.join(c)}: fails natively (rc={r[0]})")
    # Solo gasan runs, one at a time: the warnings a program gets under gasan without company.
    solo = {}
    for c, _ in usable:
        rc, _, err = run([a.gasan, "--"] + c, a.timeout)
        solo[tuple(c)] = gasan_lines(err)
        if solo[tuple(c)]:
            print(f"  NOTE: {' '.join(c)} alone under gasan (rc={rc}): " + sorted(solo[tuple(c)])[0][:160])
    t0 = time.time()
    runs = [(c, r) for _ in range(a.rounds) for c, r in usable]
    bad = []
    with ThreadPoolExecutor(a.jobs) as ex:
        for (c, r), got in zip(runs, ex.map(lambda cr: run([a.gasan, "--"] + cr[0], a.timeout), runs)):
            rc, out, err = got
            why = []
            if rc != 0:
                why.append(f"rc={rc}")
            if normalize(out) != normalize(r[1]):
                why.append("stdout differs from native")
            extra = sorted(gasan_lines(err) - solo[tuple(c)])
            if extra or "GPUAddressSanitizer" in err:
                why.append("gasan output: " + (extra or [l for l in err.splitlines() if "Sanitizer" in l])[0][:160])
            if why:
                bad.append((" ".join(c), "; ".join(why)))
    secs = time.time() - t0
    for name, why in bad[:5]:
        print(f"  FAIL {name}: {why}")
    print(f"CONCURRENT label={a.label} programs={len(usable)} jobs={a.jobs} rounds={a.rounds} runs={len(runs)} failed={len(bad)} seconds={secs:.1f}")
    sys.exit(1 if bad or not usable else 0)


if __name__ == "__main__":
    main()
