#!/usr/bin/env python3
"""Runs the detection suite natively, under gasan (scale 8, 7, and the SASS-only build), and under
compute-sanitizer memcheck (with and without --padding, and on the -sanitize memcheck build); prints
one table per case and tool (detected / missed / false report) and per-class detection rates.
Exits non-zero if gasan regresses against tests/expectations.json.

Every case is its own program (tests/suite/<case>.cu, built by tests/build.sh into BIN_DIR as
<program>, <program>_noline, <program>_sass and <program>.csan): `<program>` runs the planted bug,
`<program> clean` the clean twin. The expected source line of a device access is the line of the
`// BUG:<case>` marker in the case's own source.

Usage (GPU machine): python3 tests/run_suite.py --bin-dir build/suite --gasan build/bin/gasan-run [--out FILE]
"""
import argparse, json, os, re, shutil, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
GASAN_AT = re.compile(r"(?:, at |SUMMARY: GPUAddressSanitizer: [a-z-]+ )\S*?([A-Za-z0-9_.]+\.cu):(\d+)")
CS_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
# A suite program's exit status when this machine lacks what the case needs (a second GPU): it
# prints "SKIPPED: <why>". Such a run is neither a detection nor a miss.
SKIP_STATUS = 77


def bug_lines(source):
    """case name -> source line of its `// BUG:<case>` marker."""
    lines = {}
    with open(source) as f:
        for no, line in enumerate(f, 1):
            for m in re.finditer(r"BUG:([a-z0-9_]+)", line):
                lines[m.group(1)] = no
    return lines


def bug_line(case):
    """Source line of the case's `// BUG:<case>` marker in its own source, or None."""
    return bug_lines(os.path.join(HERE, case["source"])).get(case["name"])


def parse_gasan(out):
    """[(kind, line or None)] of every gasan report in an output: the JSON objects gasan prints with
    --report-format json (one per line, what the runner asks for), else the text reports."""
    reports = []
    for raw in out.splitlines():
        raw = raw.strip()
        if not (raw.startswith("{") and '"tool"' in raw):
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if obj.get("tool") == "gasan" and obj.get("kind"):
            # As in the text: a line counts when it is in a .cu file (the case's own source).
            cu = str(obj.get("file") or "").endswith(".cu")
            reports.append((obj["kind"], obj.get("line") if cu else None))
    if reports:
        return reports
    for block in out.split("==ERROR: GPUAddressSanitizer: ")[1:]:
        kind = re.match(r"([a-z-]+)", block).group(1)
        m = GASAN_AT.search(block)
        reports.append((kind, int(m.group(2)) if m else None))
    return reports


def parse_cs(out):
    """Number of errors compute-sanitizer reported, or None if it did not finish."""
    m = CS_SUMMARY.search(out)
    return int(m.group(1)) if m else None


def classify_gasan(case, bug_line, buggy_out, clean_out):
    """'detected', 'missed', 'wrong-report' or 'false-report'."""
    if parse_gasan(clean_out):
        return "false-report"
    reps = parse_gasan(buggy_out)
    if not reps:
        return "missed"
    kind, line = reps[0]
    if case.get("kind") and kind != case["kind"]:
        if case["kind"] == "heap-buffer-overflow" and kind in ("gpu-fault-in-uninstrumented-code",):
            return "detected"
        if case["kind"] == "heap-use-after-free" and kind in ("gpu-fault-in-uninstrumented-code",):
            return "detected"
        return "wrong-report"
    if not case.get("host_call") and line is not None and bug_line is not None and line != bug_line:
        return "wrong-report"
    return "detected"


def classify_cs(buggy_out, clean_out):
    c, b = parse_cs(clean_out), parse_cs(buggy_out)
    if c:
        return "false-report"
    if b is None:
        return "error"
    return "detected" if b > 0 else "missed"


def skipped(rc, out):
    """The reason a run was skipped (exit status SKIP_STATUS with its SKIPPED line), or None."""
    if rc != SKIP_STATUS:
        return None
    return next((l.strip() for l in out.splitlines() if l.startswith("SKIPPED")), "SKIPPED")


def rates(cases, results, tool):
    by = {}
    for c in cases:
        r = results.get((c["name"], tool))
        if r is None or r == "skipped":
            continue
        d, n = by.get(c["cls"], (0, 0))
        by[c["cls"]] = (d + (r == "detected"), n + 1)
    return by


def regressions(cases, results):
    """gasan rows that do worse than the committed expectations."""
    bad = []
    for c in cases:
        for tool, key in (("gasan-s8", "gasan_s8"), ("gasan-s8-noline", "gasan_s8"), ("gasan-s7", "gasan_s7"), ("gasan-sass", "gasan_sass")):
            r = results.get((c["name"], tool))
            if r is None or r == "skipped":
                continue
            if r == "false-report" or (c["expect"][key] and r != "detected"):
                bad.append(f"{c['name']} {tool}: {r}")
    return bad


def render(cases, results, tools):
    mark = {"detected": "✔", "missed": "·", "false-report": "FALSE", "wrong-report": "wrong", "error": "err", "skipped": "skip"}
    lines = ["| case | class | " + " | ".join(tools) + " |", "|---|---|" + "---|" * len(tools)]
    for c in cases:
        lines.append(f"| {c['name']} | {c['cls']} | " + " | ".join(mark.get(results.get((c['name'], t)), "—") for t in tools) + " |")
    lines += ["", "| class | " + " | ".join(tools) + " |", "|---|" + "---|" * len(tools)]
    classes = sorted({c["cls"] for c in cases})
    per = {t: rates(cases, results, t) for t in tools}
    for cl in classes:
        lines.append(f"| {cl} | " + " | ".join(f"{per[t][cl][0]}/{per[t][cl][1]}" if cl in per[t] else "—" for t in tools) + " |")
    tot = lambda t: (sum(d for d, _ in per[t].values()), sum(n for _, n in per[t].values()))
    lines.append("| **all** | " + " | ".join(f"**{tot(t)[0]}/{tot(t)[1]}**" for t in tools) + " |")
    return "\n".join(lines)


def run(cmd, timeout=120):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or "") + "[timeout]"
    except OSError as e:  # a program that was not built
        return 127, f"[cannot run {cmd[0]}: {e}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--out")
    ap.add_argument("--only")
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--tools", help="comma-separated subset of: native,gasan-s8,gasan-s7,gasan-sass,gasan-s8-noline,cs,cs-padding,cs-compiletime")
    ap.add_argument("--jobs", type=int, default=8, help="runs at once on the GPU (default 8: users run test suites in parallel, and gasan must stay exact when they do)")
    a = ap.parse_args()
    exp = json.load(open(os.path.join(HERE, "expectations.json")))
    cases = exp["cases"]
    if a.only:
        cases = [c for c in cases if c["name"] in a.only.split(",")]
    lines = {c["name"]: bug_line(c) for c in cases}
    # The binary of a case's program in one build variant ("" plain, "_noline", "_sass", ".csan").
    b = lambda c, variant="": os.path.join(a.bin_dir, c["program"] + variant)
    built = lambda variant: any(os.path.exists(b(c, variant)) for c in cases)
    tools = {
        "native": lambda c, m: [b(c)] + m,
        # Reports read as JSON (one object per line), not scraped from the text.
        # A case's own options (gasan_args: an option it needs, such as outside_checks) follow.
        "gasan-s8": lambda c, m: [a.gasan, "--report-format", "json", "--shadow-scale", "8", *c.get("gasan_args", []), "--", b(c)] + m,
        "gasan-s7": lambda c, m: [a.gasan, "--report-format", "json", "--shadow-scale", "7", *c.get("gasan_args", []), "--", b(c)] + m,
        "gasan-sass": lambda c, m: [a.gasan, "--report-format", "json", *c.get("gasan_args", []), "--", b(c, "_sass")] + m,
    }
    if built("_noline"):
        # Without -lineinfo reports name the PTX line; only the kind is compared.
        tools["gasan-s8-noline"] = lambda c, m: [a.gasan, "--report-format", "json", *c.get("gasan_args", []), "--", b(c, "_noline")] + m
    if shutil.which("compute-sanitizer") and not a.no_sanitizer:
        tools["cs"] = lambda c, m: ["compute-sanitizer", "--tool", "memcheck", b(c)] + m
        tools["cs-padding"] = lambda c, m: ["compute-sanitizer", "--tool", "memcheck", "--padding", "1024", b(c)] + m
        if built(".csan"):
            tools["cs-compiletime"] = lambda c, m: ["compute-sanitizer", "--tool", "memcheck", b(c, ".csan")] + m
    if a.tools:
        keep = set(a.tools.split(","))
        tools = {k: v for k, v in tools.items() if k in keep}
    results, notes = {}, []
    jobs = [(c, t, cmd) for c in cases for t, cmd in tools.items()]

    def one(job):
        c, t, cmd = job
        return job, run(cmd(c, [])), run(cmd(c, ["clean"]))

    # Independent processes share the GPU; run several at once to fit the lease.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for (c, t, _), (rb, ob), (rc, oc) in ex.map(one, jobs):
            why = skipped(rb, ob) or skipped(rc, oc)
            if why:
                results[(c["name"], t)] = "skipped"
                if t == "native":
                    notes.append(f"{c['name']}: skipped ({why})")
                continue
            if t == "native":
                results[(c["name"], t)] = "clean-ok" if rc == 0 and "result ok" in oc else "clean-broken"
                if results[(c["name"], t)] != "clean-ok":
                    notes.append(f"{c['name']}: clean twin fails natively (rc={rc})")
            elif t.startswith("gasan"):
                line = None if t.endswith("noline") else lines.get(c["name"])
                results[(c["name"], t)] = classify_gasan(c, line, ob, oc)
                if "result ok" not in oc:
                    notes.append(f"{c['name']} {t}: clean twin did not finish ({oc.strip().splitlines()[-1:] if oc.strip() else ''})")
                if results[(c["name"], t)] in ("wrong-report", "false-report"):
                    first = next((l for l in (ob + oc).splitlines() if "GPUAddressSanitizer" in l), "")
                    notes.append(f"{c['name']} {t}: {results[(c['name'], t)]}: {first}")
            else:
                results[(c["name"], t)] = classify_cs(ob, oc)
    shown = [t for t in tools if t != "native"]
    report = render(cases, results, shown)
    reg = regressions(cases, results)
    report += "\n\n" + ("gasan regressions against expectations:\n" + "\n".join(f"- {r}" for r in reg) if reg else "No gasan regression against tests/expectations.json.")
    if notes:
        report += "\n\nNotes:\n" + "\n".join(f"- {n}" for n in notes)
    print(report)
    if a.out:
        open(a.out, "w").write(report + "\n")
    return 1 if reg else 0


if __name__ == "__main__":
    sys.exit(main())
