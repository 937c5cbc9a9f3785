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
  bounds      each shadow load predicated off when its address lies inside a [lo, hi) range read
              from the constant bank (a module .const here, standing in for per-launch bounds
              passed as kernel parameters): what a launch-bounds fast path would cost, the range
              covering every buffer so no shadow load issues
  boundsbr    the same test as a branch around each check's shadow-address computation and load
  inbskip     a check whose address lies inside its parameter's bounds (the `$gasan_inb_N` fast
              path) jumps past the granule-offset compare too, not only past the shadow load
              (an aligned access inside whole granules of a live block cannot fail it)
  entrybr     boundsbr with the range read from global memory once at each kernel's entry (one
              16-byte load a thread, as a device-side extent lookup per pointer parameter would
              cost) instead of from the constant bank
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


def bounds(lines):
    """Shadow loads skipped for addresses inside a constant-bank [lo, hi) (all of memory here)."""
    out = []
    for l in lines:
        if l.startswith(".visible .entry") or l.startswith(".entry"):
            if not any(x.startswith(".const .align 8 .u64 __gasan_bnd") for x in out):
                out.append(".const .align 8 .u64 __gasan_bnd[2] = {0, 18446744073709551615};")
        if shadow_load.match(l):
            out += ["\t{ .reg .pred %gbq; .reg .b64 %gbv; //gasan",
                    "\tld.const.u64 %gbv, [__gasan_bnd]; //gasan",
                    "\tsetp.lt.u64 %gbq, %gsa0, %gbv; //gasan",
                    "\tld.const.u64 %gbv, [__gasan_bnd+8]; //gasan",
                    "\tsetp.ge.or.u64 %gbq, %gsa0, %gbv, %gbq; //gasan",
                    "\tand.pred %gsp0, %gsp0, %gbq; //gasan",
                    "\t} //gasan"]
        out.append(l)
    return out


def bounds_branch(lines):
    """Each check's shadow block skipped by a branch when its address is inside the constant-bank range."""
    out, n, i = [], 0, 0
    while i < len(lines):
        l = lines[i]
        if l.startswith(".visible .entry") or l.startswith(".entry"):
            if not any(x.startswith(".const .align 8 .u64 __gasan_bnd") for x in out):
                out.append(".const .align 8 .u64 __gasan_bnd[2] = {0, 18446744073709551615};")
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if l.strip() == "{ //gasan" and nxt.strip().startswith(".reg .b32 %gsw<3>;"):
            j = i + 1
            while not shadow_load.match(lines[j]):
                j += 1
            v = re.search(r"ld\.global\.nc\.u8 (%gs[vr]\w+),", lines[j]).group(1)
            n += 1
            out += [f"\t.reg .pred %gbq{n}; .reg .b64 %gbv{n}; //gasan",
                    f"\tld.const.u64 %gbv{n}, [__gasan_bnd]; //gasan",
                    f"\tsetp.lt.u64 %gbq{n}, %gsa0, %gbv{n}; //gasan",
                    f"\tld.const.u64 %gbv{n}, [__gasan_bnd+8]; //gasan",
                    f"\tsetp.ge.or.u64 %gbq{n}, %gsa0, %gbv{n}, %gbq{n}; //gasan",
                    f"\tmov.u32 {v}, 255; //gasan",
                    f"\t@!%gbq{n} bra $gbskip{n}; //gasan"]
            while lines[i].strip() != "} //gasan":
                out.append(lines[i])
                i += 1
            out.append(lines[i])
            out.append(f"$gbskip{n}: //gasan")
            i += 1
            continue
        out.append(l)
        i += 1
    return out


def entry_load(lines):
    """boundsbr whose [lo, hi) comes from one global load at the kernel's entry (values kept opaque)."""
    out, in_entry, done = [], False, False
    for l in bounds_branch(lines):
        s = l.strip()
        if s.startswith(".visible .entry") or s.startswith(".entry"):
            in_entry, done = True, False
        if in_entry and not done and s and not s.startswith(".") and s not in ("{", ")") and not s.startswith("//") and "(" not in s and not s.startswith(".param"):
            out += ["\t.reg .b64 %gbe<3>; //gasan",
                    "\tld.const.u64 %gbe0, [__gasan_ctl+48]; //gasan",
                    "\tld.global.nc.v2.u64 {%gbe1, %gbe2}, [%gbe0]; //gasan",
                    "\tand.b64 %gbe1, %gbe1, 1; //gasan",
                    "\tor.b64 %gbe2, %gbe2, -9223372036854775808; //gasan"]
            done = True
        l = re.sub(r"ld\.const\.u64 (%gbv\d+), \[__gasan_bnd\];", r"mov.b64 \1, %gbe1;", l)
        l = re.sub(r"ld\.const\.u64 (%gbv\d+), \[__gasan_bnd\+8\];", r"mov.b64 \1, %gbe2;", l)
        out.append(l)
    return out


def inb_skip(lines):
    """Each `$gasan_inb_N:` label moved below its check's `@%gsp1 bra $gasan_fail_N;`."""
    out, pending = [], None
    for l in lines:
        m = re.match(r"^\s*(\$gasan_inb_\d+):", l)
        if m:
            pending = l
            continue
        out.append(l)
        if pending and re.match(r"^\s*@%gsp1 bra \$gasan_fail_\d+;", l):
            out.append(pending)
            pending = None
    assert pending is None, "an inb label without its fail branch"
    return out


variants = {
    "full": lines,
    "noprefetch": [l for l in lines if "prefetch.L2" not in l],
    "noload": [l for l in lines if not shadow_load.match(l)],
    "deferred": deferred(lines),
    "prefetchall": prefetch_all(lines, "L2"),
    "prefetchl1": prefetch_all(lines, "L1"),
    "prefetchld": prefetch_all(lines, "L2", loads_only=True),
    "bounds": bounds(lines),
    "boundsbr": bounds_branch(lines),
    "entrybr": entry_load(lines),
    "inbskip": inb_skip(lines),
    "evictlast": [l.replace("ld.global.nc.u8", "ld.global.nc.L1::evict_last.u8") for l in lines],
}
for name, body in variants.items():
    with open(os.path.join(out, f"{prefix}.{name}.ptx"), "w") as f:
        f.write("\n".join(body))
