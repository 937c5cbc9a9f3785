#!/usr/bin/env python3
"""Runs the GPU tests of issue 39 (group jit: Triton, torch.compile, JAX, Numba, NVRTC) and issue 40
(group mgpu: device 1, peer access, IPC, contexts, CUDA_VISIBLE_DEVICES, NCCL, torch.multiprocessing)
natively, under gasan-run and under compute-sanitizer, and prints one short table:

    case | expected | native | gasan got | verdict | compute-sanitizer | time native / gasan / cs

Cases: the Python ones in expectations.json beside this file, the suite programs of tests/expectations.json
whose `group` is the one asked for (each as its bug and its clean twin). A case whose `until` names
an issue item still to land shows XFAIL when gasan misses it (XPASS when it already passes), never
FAIL; a clean case whose `vacuous_until` is set says its silence proves nothing yet. SKIP: the
program exited 77 (no second GPU, framework missing) or its clean twin fails natively.
Exits 1 when a row FAILs.

Usage (GPU machine, repository root):
    python3 runtime/gpu/python/run_groups.py --group jit --gasan build/bin/gasan-run --bin-dir build/suite
Options: --group jit|mgpu|all, --only a,b, --match REGEX, --jobs N (cases at once), --no-sanitizer,
--out DIR (logs), --timeout SECONDS (per run), --list.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
# NVLink multicast stays off on the multi-GPU machines (their KINDS.md): in every run, native too.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
CS_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
SKIP_RC = 77


def marker_line(path, name):
    """Line of the `BUG:<name>` marker in path, or None."""
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if re.search(r"BUG:%s\b" % re.escape(name), line):
                return no
    return None


def load_json(path):
    with open(path) as f:
        return json.load(f)


def load_cases(group, bin_dir, py):
    """Rows to run: dicts with name, group, cmd (argv), expect (report/clean) and what to compare."""
    rows = []
    for c in load_json(os.path.join(HERE, "expectations.json"))["cases"]:
        if group in ("all", c["group"]):
            # "{bin_dir}" in a Python case's arguments: where the suite's programs are (its own program among them).
            r = dict(c, cmd=[py, os.path.join(HERE, c["cmd"][0])] + [x.replace("{bin_dir}", bin_dir) for x in c["cmd"][1:]])
            if c["expect"] == "report":
                r["source_path"] = os.path.join(HERE, c["source"])
                r["line"] = marker_line(r["source_path"], c["name"]) if c.get("check_line", True) else None
            rows.append(r)
    for c in load_json(os.path.join(ROOT, "tests", "expectations.json"))["cases"]:
        if "group" not in c or group not in ("all", c["group"]):
            continue
        prog = os.path.join(bin_dir, c["program"])
        src = os.path.join(ROOT, "tests", c["source"])
        base = {"group": c["group"], "cs": True, "gasan_args": c.get("gasan_args", [])}
        for k in ("until", "needs", "device"):
            if k in c:
                base[k] = c[k]
        rows.append(dict(base, name=c["name"], cmd=[prog], expect="report", kind=c["kind"], access=c["access"], kernel=c["kernel"],
                         source=os.path.basename(src), line=marker_line(src, c["name"]), twin=c["name"] + "_clean"))
        clean = dict(base, name=c["name"] + "_clean", cmd=[prog, "clean"], expect="clean")
        clean.pop("device", None)
        clean.pop("until", None)
        if "until" in c:
            clean["vacuous_until"] = c["until"]
        if "clean_until" in c:
            clean["until"] = c["clean_until"]
        rows.append(clean)
    return rows


def parse_reports(out):
    """gasan's reports in an output: the JSON objects of --report-format json, else the text headers."""
    reps = []
    for raw in out.splitlines():
        raw = raw.strip()
        if raw.startswith("{") and '"tool"' in raw:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if obj.get("tool") == "gasan" and obj.get("kind"):
                reps.append(obj)
    if not reps:
        reps = [{"kind": m} for m in re.findall(r"ERROR: GPUAddressSanitizer: ([a-z-]+)", out)]
    return reps


def describe(rep):
    where = ""
    if rep.get("file"):
        where = " %s:%s" % (os.path.basename(str(rep["file"])), rep.get("line"))
    kern = (" in " + str(rep["kernel"])[:40]) if rep.get("kernel") else (" by " + str(rep["call"])) if rep.get("call") else ""
    dev = (" dev%s" % rep["device"]) if rep.get("device") is not None else ""
    return "%s %s%s%s%s" % (rep.get("kind"), rep.get("access", ""), kern, where, dev)


def judge(case, rc, out):
    """(ok, what gasan did) for one gasan run of a case."""
    reps = parse_reports(out)
    if case["expect"] == "clean":
        if reps:
            return False, "FALSE report: " + describe(reps[0])
        if rc != 0 or "result ok" not in out:
            return False, "rc=%d, no 'result ok'" % rc
        return True, "silent"
    if not reps:
        return False, "missed (rc=%d)" % rc
    r, bad = reps[0], []
    # `kind` names one report kind, or a list of kinds that each name the bug (an overflow whose
    # first reported thread ran into the redzone or on into the next allocation).
    kinds = case["kind"] if isinstance(case["kind"], list) else [case["kind"]]
    if r.get("kind") not in kinds:
        bad.append("kind")
    if case.get("access") and r.get("access") not in (None, case["access"]):
        bad.append("access")
    if case.get("kernel") and case["kernel"] not in str(r.get("kernel") or ""):
        bad.append("kernel")
    # A host call's report (a copy's or NCCL's range checked before it runs) names the call.
    if case.get("call") and case["call"] != r.get("call"):
        bad.append("call (want %s)" % case["call"])
    if case.get("line") is not None:
        if os.path.basename(str(r.get("file") or "")) != os.path.basename(case["source"]) or r.get("line") != case["line"]:
            bad.append("line (want %s:%d)" % (os.path.basename(case["source"]), case["line"]))
    if case.get("source_file") and os.path.basename(str(r.get("file") or "")) != case["source_file"]:
        bad.append("file (want %s)" % case["source_file"])
    if "device" in case and r.get("device") != case["device"]:
        bad.append("device (want %s)" % case["device"])
    return not bad, ("wrong " + ", ".join(bad) + ": " if bad else "") + describe(r)


def verdict(case, ok):
    if case.get("until"):
        return "XPASS" if ok else "XFAIL"
    return "PASS" if ok else "FAIL"


def run(cmd, env, timeout, log):
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stdout or ""
        if isinstance(partial, bytes):
            partial = partial.decode(errors="replace")
        rc, out = 124, partial + "\n[timeout]"
    except OSError as e:  # not built, not installed
        rc, out = 127, "[cannot run %s: %s]" % (cmd[0], e)
    secs = time.perf_counter() - t0
    with open(log, "w") as f:
        f.write("$ %s\n%s" % (" ".join(cmd), out))
    return rc, out, secs


def seconds(out, what):
    """A `<what>_seconds N` line a case prints (its own timing of a loop, or of compiling)."""
    m = re.search(r"^%s_seconds ([0-9.]+)" % what, out, re.M)
    return float(m.group(1)) if m else None


def one(case, a, env, cs, twin_broken=None):
    """One case's row; twin_broken: why its clean twin does not run natively here (then a SKIP)."""
    log = lambda tool: os.path.join(a.out, "%s.%s.log" % (case["name"], tool))
    row = {"case": case}
    nrc, nout, row["t_native"] = run(case["cmd"], env, a.timeout, log("native"))
    skipped = nrc == SKIP_RC or "SKIPPED:" in nout
    if skipped or (case["expect"] == "clean" and nrc != 0) or twin_broken:
        why = next((l for l in nout.splitlines() if "SKIPPED" in l), "") or twin_broken or "fails natively (rc=%d): %s" % (nrc, (nout.strip().splitlines() or [""])[-1][:90])
        row.update(native="skip" if skipped else "ok" if nrc == 0 else "rc=%d" % nrc, verdict="SKIP", got="", note=why.replace("SKIPPED: ", ""))
        return row
    row["native"] = "ok" if nrc == 0 else "rc=%d" % nrc
    gcmd = [a.gasan, "--report-format", "json", *case.get("gasan_args", []), "--"] + case["cmd"]
    grc, gout, row["t_gasan"] = run(gcmd, env, a.timeout, log("gasan"))
    ok, row["got"] = judge(case, grc, gout)
    row["verdict"] = verdict(case, ok)
    notes = []
    if case.get("until") and not ok:
        notes.append("expected to fail until " + case["until"].split(":")[0] + " is done")
    if case.get("until") and ok:
        notes.append("passes before " + case["until"].split(":")[0] + " is done: update its expectation")
    if ok and case.get("vacuous_until"):
        notes.append("vacuous until " + case["vacuous_until"].split(":")[0])
    for what in ("compile", "loop"):
        tn, tg = seconds(nout, what), seconds(gout, what)
        if tn and tg:
            notes.append("%s %.3fs -> %.3fs (%.2fx)" % (what, tn, tg, tg / tn))
    if cs and case.get("cs"):
        crc, cout, row["t_cs"] = run(["compute-sanitizer", "--tool", "memcheck", "--target-processes", "all"] + case["cmd"], env, a.timeout, log("cs"))
        m = CS_SUMMARY.search(cout)
        if m is None:
            row["cs"] = "err rc=%d" % crc
        elif case["expect"] == "report":
            row["cs"] = "found" if int(m.group(1)) else "missed"
        else:
            row["cs"] = "FALSE %s" % m.group(1) if int(m.group(1)) else "silent"
    row["note"] = "; ".join(notes)
    return row


def render(rows):
    head = ("case", "expected", "native", "verdict", "gasan got", "cs", "native s", "gasan s", "cs s", "notes")
    fmt = lambda r: "| " + " | ".join(str(x) for x in r) + " |"
    lines = [fmt(head), "|" + "---|" * len(head)]
    t = lambda r, k: "%.1f" % r[k] if k in r else "—"
    for r in rows:
        c = r["case"]
        lines.append(fmt((c["name"], c["expect"], r.get("native", "—"), r["verdict"], r.get("got", "") or "—", r.get("cs", "—"),
                          t(r, "t_native"), t(r, "t_gasan"), t(r, "t_cs"), r.get("note", ""))))
    count = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("PASS", "FAIL", "XFAIL", "XPASS", "SKIP")}
    lines.append("")
    lines.append(", ".join("%s %d" % kv for kv in count.items()))
    return "\n".join(lines), count["FAIL"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", choices=("jit", "mgpu", "all"), required=True)
    ap.add_argument("--gasan", default=os.path.join(ROOT, "target", "release", "gasan-run"))
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "suite"), help="the suite's programs (tests/build.sh)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--match", help="only the cases whose name matches this regular expression (and their clean twins' names)")
    ap.add_argument("--jobs", type=int, default=1, help="cases at once (1: times comparable)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--out", default="/tmp/gasan-groups")
    ap.add_argument("--list", action="store_true", help="print the cases with their expectations and exit")
    a = ap.parse_args()
    rows = load_cases(a.group, a.bin_dir, a.python)
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {c["name"] for c in rows}
        if unknown:
            ap.error("no such case in group %s: %s" % (a.group, ", ".join(sorted(unknown))))
        rows = [c for c in rows if c["name"] in want]
    if a.match:
        rows = [c for c in rows if re.search(a.match, c["name"])]
        if not rows:
            ap.error("no case of group %s matches %r" % (a.group, a.match))
    if a.list:
        for c in rows:
            where = ("in " + c["kernel"]) if c.get("kernel") else ("by host call " + c["call"]) if c.get("call") else ""
            exp = c["expect"] if c["expect"] == "clean" else "%s %s %s at %s:%s" % ("|".join(c["kind"]) if isinstance(c["kind"], list) else c["kind"], c.get("access", ""), where, c.get("source_file") or c["source"], c.get("line") or "any")
            print("%-30s %-5s %s%s" % (c["name"], c["group"], exp, ("  [until %s]" % c["until"].split(":")[0]) if c.get("until") else ""))
        return 0
    if not os.access(a.gasan, os.X_OK):
        ap.error("no gasan-run at %s (--gasan)" % a.gasan)
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, **MULTICAST_OFF)
    env["GASAN_OPTIONS"] = "cache_dir=%s/cache%s" % (a.out, ":" + env["GASAN_OPTIONS"] if env.get("GASAN_OPTIONS") else "")
    cs = shutil.which("compute-sanitizer") is not None and not a.no_sanitizer
    # Clean cases first: a bug case whose clean twin does not run natively here is a SKIP too.
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        cleans = {r["case"]["name"]: r for r in ex.map(lambda c: one(c, a, env, cs), [c for c in rows if c["expect"] == "clean"])}
        broken = lambda c: ("its clean twin: " + cleans[c["twin"]]["note"]) if c.get("twin") in cleans and cleans[c["twin"]]["verdict"] == "SKIP" else None
        bugs = {r["case"]["name"]: r for r in ex.map(lambda c: one(c, a, env, cs, broken(c)), [c for c in rows if c["expect"] == "report"])}
    done = [cleans.get(c["name"]) or bugs[c["name"]] for c in rows]
    table, fails = render(done)
    print(table)
    print("logs: %s" % a.out)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
