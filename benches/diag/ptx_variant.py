#!/usr/bin/env python3
"""A ptxas stand-in for diagnosing what a checked Triton kernel's steady state pays for: it takes
ptxas's command line, and when the PTX file it is handed is checked (declares gasan's control
block), it takes parts of the checks out before running the real ptxas with the same arguments.
The result is unsound on purpose: a measurement, never a build to run programs under.

Set as gasan-ptxas's real ptxas (`GASAN_REAL_PTXAS=benches/diag/ptx_variant.py`), with the
variant in `GASAN_PTX_VARIANT` (parts joined by commas) and the real tool in `PTX_VARIANT_PTXAS`
(default: Triton's bundled ptxas). Unchecked PTX and every other command line pass through as
they are. Parts, in each kernel (`.entry`) of the module:

  norange  a loop's range test (the block that ends `@!%gshN_M bra.uni`) has no instructions left,
           so the fast copy of the loop always runs and the checked copy is unreachable;
  nopre    the checks between the entry's parameter-bounds prologue and the first range test
           lose their instructions (their register declarations and labels stay);
  nopost   likewise for the checks after the last versioned loop (`$gasan_loopN_done:`) up to
           the kernel's first `ret`;
  nopreshared, nopreglobal, nopostshared, nopostglobal
           that region's shared/local checks only (blocks declaring `%gso` registers), or all
           but them.

The entry's parameter-bounds lookups stay in every variant: the checks left use them. The
program's own accesses stay in every variant too: a masked run's access, which gasan rewrites
under its verdict and marks as its own line, gets the access's guard back (before c3a952e such
loads and stores were blanked with the checks).
Used by scripts/gpu-batch.sh's `variants` step (benches/jit/pair.py under each variant).
"""
import os
import re
import subprocess
import sys

GASAN = "//gasan"
RANGE_BRANCH = re.compile(r"@!%gsh\d+_\d+ bra\.uni ")


def real_ptxas():
    if os.environ.get("PTX_VARIANT_PTXAS"):
        return os.environ["PTX_VARIANT_PTXAS"]
    import triton  # the image's Triton: its bundled ptxas

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def is_instruction(line):
    """A line of gasan's that does something: not a declaration, a label or a brace."""
    s = line.split(GASAN)[0].strip()
    return bool(s) and not s.startswith(".reg") and not s.endswith(":") and s not in ("{", "}")


def blocks(lines, lo, hi):
    """The `{ //gasan` ... `} //gasan` blocks opened in lines[lo:hi], outermost, as (open, close)."""
    out, depth, start = [], 0, None
    for i in range(lo, hi):
        s = lines[i].strip()
        if s == "{ " + GASAN or s == "{" + GASAN:
            if depth == 0:
                start = i
            depth += 1
        elif (s == "} " + GASAN or s == "}" + GASAN) and depth:
            depth -= 1
            if depth == 0:
                out.append((start, i))
    return out


# A masked run's access (masked_runs.rs) runs under gasan's verdict, `@%gsgN`, set by
# `setp.eq.and.u32 %gsgN, <mask bit>, 0, <the access's own guard>;`: the program's statement,
# marked as gasan's. Stripped, it gets its own guard back.
RUN_GUARD = re.compile(r"^(\s*)@(%gsg\d+)\s+(.*?)\s*" + re.escape(GASAN) + r"\s*$")
RUN_VERDICT = re.compile(r"setp\.eq\.and\.u32\s+(%gsg\d+),\s*[^,]+,\s*[^,]+,\s*(!?%\w+)\s*;")


def strip(lines, lo, hi, keep, guards):
    """Blanks gasan's instructions in lines[lo:hi] except the lines of `keep`; a masked run's
    access keeps its statement under its own guard (`guards`: run verdict -> the guard)."""
    n = 0
    for i in range(lo, hi):
        access = RUN_GUARD.match(lines[i])
        if i in keep:
            continue
        if access:
            own = guards.get(access.group(2))
            if own is None:
                sys.exit(f"ptx_variant: no guard found for the run access at line {i + 1}: {lines[i].strip()}")
            lines[i] = f"{access.group(1)}@{own} {access.group(3)}"
            continue
        if lines[i].rstrip().endswith(GASAN) and is_instruction(lines[i]):
            lines[i] = ""
            n += 1
    return n


def vary(text, parts):
    lines = text.split("\n")
    entries = [i for i, l in enumerate(lines) if re.match(r"\s*(\.visible\s+)?\.entry\s", l)]
    counts = {p: 0 for p in parts}
    guards = {m.group(1): m.group(2) for m in RUN_VERDICT.finditer(text)}
    for k, e in enumerate(entries):
        end = entries[k + 1] if k + 1 < len(entries) else len(lines)
        bl = blocks(lines, e, end)
        prologue = next(((a, b) for a, b in bl if any("%gsbt" in lines[j] for j in range(a, b))), None)
        ranges = [(a, b) for a, b in bl if any(RANGE_BRANCH.search(lines[j]) for j in range(a, b + 1))]
        done = [i for i in range(e, end) if re.match(r"\s*\$gasan_loop\d+_done:", lines[i])]
        ret = next((i for i in range(done[-1] if done else e, end) if re.match(r"\s*ret;", lines[i]) and GASAN not in lines[i]), end)
        body_start = prologue[1] + 1 if prologue else e
        if "norange" in parts:
            for a, b in ranges:
                counts["norange"] += strip(lines, a, b + 1, set(), guards)
        regions = {}
        if ranges:
            regions["pre"] = (body_start, ranges[0][0])
        if done:
            regions["post"] = (done[-1], ret)
        for name, (lo, hi) in regions.items():
            if "no" + name in parts:
                counts["no" + name] += strip(lines, lo, hi, set(), guards)
            for part, shared in (("no%sshared" % name, True), ("no%sglobal" % name, False)):
                if part not in parts:
                    continue
                for a, b in blocks(lines, lo, hi):
                    if any("%gso" in lines[j] and ".reg" in lines[j] for j in range(a, b)) == shared:
                        counts[part] += strip(lines, a, b + 1, set(), guards)
                if not shared:
                    # The region's checks outside any block (a masked run's lines) go too.
                    counts[part] += strip(lines, lo, hi, {j for a, b in blocks(lines, lo, hi) for j in range(a, b + 1)}, guards)
    return "\n".join(lines), counts


PARTS = ("norange", "nopre", "nopost", "nopreshared", "nopreglobal", "nopostshared", "nopostglobal")


def main():
    args = sys.argv[1:]
    parts = [p for p in os.environ.get("GASAN_PTX_VARIANT", "").split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        sys.exit(f"ptx_variant: unknown part(s) {unknown}")
    ptx = [i for i, a in enumerate(args) if a.endswith(".ptx") and os.path.isfile(a)]
    if parts and len(ptx) == 1:
        text = open(args[ptx[0]]).read()
        if "__gasan_ctl" in text:
            varied, counts = vary(text, parts)
            out = args[ptx[0]][:-4] + ".variant.ptx"
            with open(out, "w") as f:
                f.write(varied)
            args[ptx[0]] = out
            sys.stderr.write(f"ptx_variant: {counts}\n")
    sys.exit(subprocess.run([real_ptxas()] + args).returncode)


if __name__ == "__main__":
    main()
