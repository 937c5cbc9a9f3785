#!/usr/bin/env python3
"""Steady-state cost of each part of the checks, under the real runtime: a program runs under
gasan-run with `sass=0` (checked PTX read from the cache and JIT-compiled) once per variant, each
variant a copy of the checked-module cache whose checked PTX had one part of the checks taken out.
Rounds interleave the configurations; each figure is the median over rounds.

Variants (from the cache's checked PTX):
  full        as gasan wrote it
  noprefetch  without the L2 data prefetches beside batched checks
  noshared    without the shared/local bounds checks (blocks declaring %gso registers)
  noglobal    without the global checks (blocks declaring %gsa registers) and their batch branches;
              the entry's parameter-bounds prologue stays (it untags the launch's pointers)
  nochecks    noshared and noglobal together
  tagonly     the entry's parameter-bounds prologue without its tag test, branch and lookups:
              the tagged decode only (valid only for tagged launches: what a branch-free decode
              could save at most)
  selp        the prologue branch-free: the tag test selects the mask and the reach (an
              untagged launch gets empty bounds, so its checks take the shadow path)
  selpool     selp, and an untagged launch branches (not taken when tagged) to the lookups,
              placed out of line at the function's end
  sharedtrap  each shared/local check's branch to its report is a predicated trap
  orig        the program's own PTX (gasan-ptx extract), not checked
A variant name may end in `+notags`: its cache copy loses the parameter-tag tables, so launches
pass the program's pointers untagged (with `orig`, which does not untag, this is required).
Also configurations by options: `--opt NAME=GASAN_OPTIONS` (e.g. nopb=param_bounds=0), `native`
(the program without gasan-run), `--native-env NAME=VAR=VALUE` (the program without gasan-run,
VAR set, e.g. nativejit=CUDA_FORCE_PTX_JIT=1). Loop range tests stay in every variant.

The program prints lines `KTIME kernel=K us=V`, `SHORT name=K ... steady_ms=V` or
`BENCH name=K median_ms=V`; each becomes a row.
usage: cache_variants.py --gasan GASAN_RUN [--variants a,b] [--opt NAME=OPTS]... [--rounds N]
                         -- PROGRAM [ARGS...]"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

BLOCK_OPEN = re.compile(r"^\s*\{ //gasan$")
BLOCK_CLOSE = re.compile(r"^\s*\} //gasan$")
BATCH_BRANCH = re.compile(r"^\s*@%gsb\d+ bra \$gasan_batch_\w+; //gasan$")
PREFETCH = re.compile(r"^\s*prefetch\.\S+ \[[^\]]*\]; //gasan$")


def strip_blocks(ptx, kinds):
    """The PTX without the check blocks whose declarations name one of `kinds` ('%gsa<', '%gso<')."""
    out, block = [], None
    for line in ptx.split("\n"):
        if block is None and BLOCK_OPEN.match(line):
            block = [line]
            continue
        if block is not None:
            block.append(line)
            if BLOCK_OPEN.match(line):  # nested: not a check block; keep it all
                out.extend(block)
                block = None
            elif BLOCK_CLOSE.match(line):
                decls = "".join(l for l in block if ".reg" in l)
                if not any(k in decls for k in kinds):
                    out.extend(block)
                block = None
            continue
        if "%gsa<" in kinds and BATCH_BRANCH.match(line):
            continue
        out.append(line)
    return "\n".join(out + (block or []))


PB_TEST = re.compile(r"^\s*shr\.u64 %gsbt5, %gsbp(\d+), 62; //gasan$")


def prologue(ptx, selp, ool=False):
    """Rewrites each entry's tagged-parameter prologue of REVISION 49 and before (bounds.rs
    entry_lookups): from the tag test to `$gasan_pb_done` becomes a straight-line decode of the
    parameters read into %gsbpK. An entry without that label (REVISION 50's is already
    branch-free) is left as it is."""
    out, lines, i = [], ptx.split("\n"), 0
    while i < len(lines):
        m = PB_TEST.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        first = m.group(1)
        j = next((x for x in range(i, len(lines)) if lines[x].strip().startswith("$gasan_pb_done:")), None)
        if j is None or any(lines[x] == "}" for x in range(i, j)):
            out.append(lines[i])
            i += 1
            continue
        ks = sorted({int(k) for k in re.findall(r"ld\.param\.u64 %gsbp(\d+),", "\n".join(lines[max(0, i - 40):i]))})
        new = []
        if selp:
            new += [f"shr.u64 %gsbt5, %gsbp{first}, 62;", "setp.eq.u64 %gsbr, %gsbt5, 2;",
                    "selp.b64 %gsbt4, 281474976710655, -1, %gsbr;"]
        for k in ks:
            new += [f"and.b64 %gsbt6, %gsbp{k}, 4611404543450677248;", "shr.u64 %gsbt6, %gsbt6, 32;"]
            if selp:
                new += ["selp.b64 %gsbt6, %gsbt6, 0, %gsbr;", f"and.b64 %gsbp{k}, %gsbp{k}, %gsbt4;"]
            else:
                new += [f"and.b64 %gsbp{k}, %gsbp{k}, 281474976710655;"]
            new += [f"mov.b64 %gsbl{k}, %gsbp{k};", f"add.s64 %gsbh{k}, %gsbp{k}, %gsbt6;"]
        out += ["\t" + n + " //gasan" for n in new]
        if ool:
            # The lookups (from the original's look label to its join) as their own scope at
            # the function's end, with the control-block reads they need.
            li = next(x for x in range(i, j) if lines[x].strip().startswith("$gasan_pb_look:"))
            ctl = [l for l in lines[max(0, i - 40):i] if ("__gasan_ctl" in l or "__gasan_no_extent" in l) and "%gsb" in l]
            body = ["\t{ //gasan", "\t.reg .b64 %gsbt<7>; .reg .b32 %gsbs; .reg .pred %gsbq; //gasan"] + ctl + lines[li + 1:j] + ["\tbra.uni $gasan_pb_back; //gasan", "\t} //gasan"]
            out += ["\t@!%gsbr bra $gasan_pb_oolook; //gasan", "\t} //gasan", "$gasan_pb_back: //gasan"]
            # the prologue's scope closes here: skip its own closing line
            k = j + 1
            while lines[k].strip() != "} //gasan":
                k += 1
            i = k + 1
            while True:  # copy up to the function's closing brace
                l = lines[i]
                if l == "}":
                    out += ["$gasan_pb_oolook: //gasan"] + body
                    break
                out.append(l)
                i += 1
            continue
        i = j + 1
    return "\n".join(out)


VARIANTS = {
    "tagonly": lambda t: prologue(t, False),
    "selp": lambda t: prologue(t, True),
    "selpool": lambda t: prologue(t, True, True),
    "sharedtrap": lambda t: re.sub(r"@(%gsq\d+) bra \$gasan_sfail_\d+;", r"@\1 trap;", t),
    "full": lambda t: t,
    "noprefetch": lambda t: "\n".join(l for l in t.split("\n") if not PREFETCH.match(l)),
    "noshared": lambda t: strip_blocks(t, ["%gso<"]),
    "noglobal": lambda t: strip_blocks(t, ["%gsa<"]),
    "nochecks": lambda t: strip_blocks(t, ["%gsa<", "%gso<"]),
}
ROW = re.compile(r"^(?:KTIME kernel=(\S+) us=([\d.]+)|SHORT name=(\S+) .*steady_ms=([\d.]+)|BENCH name=(\S+) median_ms=([\d.]+))")


def rows(text):
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            g = [x for x in m.groups() if x is not None]
            yield g[0], float(g[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gasan", required=True)
    ap.add_argument("--variants", default="full,noprefetch,noshared,noglobal,nochecks")
    ap.add_argument("--opt", action="append", default=[], help="NAME=GASAN_OPTIONS (a full-PTX configuration)")
    ap.add_argument("--native-env", action="append", default=[], help="NAME=VAR=VALUE (a native configuration)")
    ap.add_argument("--gasan-ptx", help="for `orig` (default: beside --gasan)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-native", action="store_true")
    ap.add_argument("prog", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    prog = [p for p in a.prog if p != "--"]
    work = tempfile.mkdtemp(prefix="gasan-cv-")
    base = os.path.join(work, "base")
    env = dict(os.environ, SHORT_REPS=os.environ.get("SHORT_REPS", "20"))

    def run(cmd, opts="", extra_env=None):
        e = dict(env, **(extra_env or {}))
        if opts:
            e["GASAN_OPTIONS"] = opts
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)
        if p.returncode != 0 or "GPUAddressSanitizer" in p.stderr:
            sys.stderr.write(f"{cmd} [{opts}] rc={p.returncode}\n{p.stderr[-2000:]}\n")
        return p.stdout

    run([a.gasan] + prog, f"cache_dir={base}:sass=0")  # fills the cache with checked PTX
    ptx_files = [f for f in os.listdir(base) if re.fullmatch(r"[0-9a-f]{64}\.ptx", f)]
    configs = [] if a.no_native else [("native", prog, "", None)]
    for o in a.native_env:
        name, var, val = o.split("=", 2)
        configs.append((name, prog, "", {var: val}))
    orig = None
    if any(v.split("+")[0] == "orig" for v in a.variants.split(",")):
        gptx = a.gasan_ptx or os.path.join(os.path.dirname(a.gasan), "gasan-ptx")
        ent = os.path.join(work, "ent")
        subprocess.run([gptx, "extract", "-o", ent, prog[0]], check=True, capture_output=True)
        ptxs = [f for f in os.listdir(ent) if f.endswith(".ptx")]
        if len(ptxs) != 1 or len(ptx_files) != 1:
            sys.exit(f"orig needs one PTX module (the program has {len(ptxs)}, the cache {len(ptx_files)})")
        orig = open(os.path.join(ent, ptxs[0])).read()
    for v in a.variants.split(","):
        kind, _, mod = v.partition("+")
        d = os.path.join(work, v)
        shutil.copytree(base, d)
        for f in ptx_files:
            p = os.path.join(d, f)
            t = open(p).read()
            nt = orig if kind == "orig" else VARIANTS[kind](t)
            if kind != "full" and nt == t:
                print(f"note: variant {v} changes nothing in {f[:12]}")
            with open(p, "w") as fh:
                fh.write(nt)
        if mod == "notags":
            for f in os.listdir(d):
                if f.endswith(".tags"):
                    os.remove(os.path.join(d, f))
        configs.append((v, [a.gasan] + prog, f"cache_dir={d}:sass=0", None))
    for o in a.opt:
        name, opts = o.split("=", 1)
        configs.append((name, [a.gasan] + prog, f"cache_dir={os.path.join(work, name)}:sass=0:{opts}", None))
    for _, cmd, opts, extra in configs:  # warm each (JIT, caches) once
        run(cmd, opts, extra)
    res = defaultdict(lambda: defaultdict(list))
    for _ in range(a.rounds):
        for name, cmd, opts, extra in configs:
            for k, v in rows(run(cmd, opts, extra)):
                res[k][name].append(v)
    names = [c[0] for c in configs]
    print(f"{'row':<22}" + "".join(f"{n:>16}" for n in names) + "   (median over rounds; ratio to native)")
    for k, per in res.items():
        nat = statistics.median(per["native"]) if per.get("native") else None
        cells = []
        for n in names:
            if not per.get(n):
                cells.append(f"{'-':>12}")
                continue
            m = statistics.median(per[n])
            cells.append(f"{m:.4g}" if not nat or n == "native" else f"{m:.4g} {m / nat:.2f}x")
        print(f"{k:<22}" + "".join(c.rjust(16) for c in cells))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
