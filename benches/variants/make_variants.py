#!/usr/bin/env python3
"""Writes mechanical variants of a checked PTX module (gasan-ptx output) for benches/variants/ptxtime:
  full        the module as checked
  noprefetch  without the data prefetches issued beside the checks
  noload      the shadow loads removed (each check sees 255, 'all addressable'): the checks' ALU
              and branch cost without their memory traffic and latency
  deferred    every check computed where it is, but its branch to the failure path deferred to the
              kernel's exits (one predicate ORs them): the accesses no longer wait for their
              shadow loads. What checking after the access (speculatively) would cost.
  prefetchall every fast-path check's address prefetched to L2 (prefetch.global.L2) before its
              shadow load, not only those the prefetch planner picks
  prefetchl1  the same into L1 (prefetch.global.L1)
  prefetchld  prefetchall for checks of loads only (a prefetched store line is a DRAM read the
              store never needed)
  evictlast   shadow loads with the L1::evict_last hint (keep shadow lines in L1 over data)
Usage: make_variants.py CHECKED.ptx OUTDIR PREFIX"""
import re, sys, os

src, out, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(src).read().split("\n")
os.makedirs(out, exist_ok=True)
shadow_load = re.compile(r"^\s*@%gsp0 ld\.global\.nc\.u8 ")


def deferred(lines):
    """Each entry's fast-path check branches become ORs into one predicate tested before each ret."""
    out, in_entry, target, seen_fail_label, opened = [], False, None, False, False
    branch = re.compile(r"^\s*@(%\w+) bra (\$gasan_(?:batch|fail)_\w+);")
    for l in lines:
        s = l.strip()
        if s.startswith(".visible .entry") or s.startswith(".entry"):
            in_entry, target, seen_fail_label, opened = True, None, False, False
        if in_entry and not seen_fail_label and s == "{" and not opened:
            out.append(l)
            out.append("\t.reg .pred %gsdefer;")
            out.append("\tsetp.ne.u32 %gsdefer, 0, 0;")
            opened = True
            continue
        if in_entry and re.match(r"^\$gasan_\w+:", s):
            seen_fail_label = True
        m = branch.match(l) if in_entry and not seen_fail_label else None
        if m:
            target = target or m.group(2)
            out.append(f"\tor.pred %gsdefer, %gsdefer, {m.group(1)};")
            continue
        if in_entry and not seen_fail_label and s == "ret;" and target:
            out.append(f"\t@%gsdefer bra {target};")
        out.append(l)
        if s == "}" and in_entry and seen_fail_label:
            in_entry = False
    return out


def checked_statement(lines, i):
    """The first line after line i that gasan did not add (the statement its check guards)."""
    for l in lines[i + 1:]:
        if "//gasan" not in l and l.strip() and not l.strip().startswith(".loc"):
            return l.strip()
    return ""


def prefetch_all(lines, level, loads_only=False):
    """A prefetch of each fast-path check's address right after the address is formed."""
    out, fast = [], False
    addr = re.compile(r"^\s*(mov\.b64|add\.s64) %gsa0, ")
    for i, l in enumerate(lines):
        s = l.strip()
        if ".entry" in s:
            fast = True
        if re.match(r"^\$gasan_\w+:", s):
            fast = False
        out.append(l)
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if loads_only and fast and addr.match(l) and not checked_statement(lines, i).startswith("ld."):
            continue
        if fast and addr.match(l) and not nxt.startswith("prefetch"):
            out.append(f"\tprefetch.global.{level} [%gsa0]; //gasan")
    return out


variants = {
    "full": lines,
    "noprefetch": [l for l in lines if "prefetch.L2" not in l],
    "noload": [l for l in lines if not shadow_load.match(l)],
    "deferred": deferred(lines),
    "prefetchall": prefetch_all(lines, "L2"),
    "prefetchl1": prefetch_all(lines, "L1"),
    "prefetchld": prefetch_all(lines, "L2", loads_only=True),
    "evictlast": [l.replace("ld.global.nc.u8", "ld.global.nc.L1::evict_last.u8") for l in lines],
}
for name, body in variants.items():
    with open(os.path.join(out, f"{prefix}.{name}.ptx"), "w") as f:
        f.write("\n".join(body))
