#!/usr/bin/env python3
"""Variants of a checked PTX module for the driver-only load experiment (benches/diag/build.sh):
each takes one thing the checks add away, with values the compiler cannot fold, so the variants'
load times say what a checked kernel's own load pays for.
  norep   each kernel's report block (the ring record before its trap) is a bare trap
  noctl   the control block reads (__gasan_ctl, constant bank 3) and __gasan_no_extent's
          address (constant bank 4) are special-register reads instead
  bare    both
and, each changing one kind of statement of the report blocks only:
  nofence   without their fence.release.sys
  gpufence  with fence.acq_rel.gpu instead
  noatom    the ring slot's atom.global.add is a volatile load
  novol     plain loads and stores instead of volatile ones
  membarsys with membar.sys instead
  relgpu    with fence.release.gpu instead
  onesys    the last of each block's fences a fence.release.sys, the others fence.release.gpu
usage: variants.py CHECKED.ptx OUTDIR  -> OUTDIR/checked_<variant>.ptx"""
import re
import sys

src, out = sys.argv[1], sys.argv[2]
ptx = open(src).read()


def norep(t):
    # From a kernel's shared report label to the trap that ends it and its closing brace.
    return re.sub(r"(\$gasan_fail_shared: //gasan\n)\s*\{ //gasan\n.*?\n\s*trap; //gasan\n\s*\} //gasan\n", r"\1\ttrap;\n", t, flags=re.S)


def noctl(t):
    t = re.sub(r"ld\.const\.u64 (%\w+), \[__gasan_ctl\+\d+\];", r"mov.u64 \1, %globaltimer;", t)
    t = re.sub(r"ld\.const\.u32 (%\w+), \[__gasan_ctl\+\d+\];", r"mov.u32 \1, %clock;", t)
    return re.sub(r"mov\.u64 (%\w+), __gasan_no_extent;", r"mov.u64 \1, %globaltimer;", t)


def sub(pattern, repl, flags=0):
    return lambda t: re.sub(pattern, repl, t, flags=flags)


variants = [
    ("norep", norep),
    ("noctl", noctl),
    ("bare", lambda t: noctl(norep(t))),
    ("nofence", sub(r"\n\s*fence\.release\.sys; //gasan", "")),
    ("gpufence", sub(r"fence\.release\.sys;", "fence.acq_rel.gpu;")),
    ("noatom", sub(r"atom\.global\.add\.u32 (%\w+), \[(%\w+)\+0\], 1;", r"ld.volatile.global.u32 \1, [\2];")),
    ("membarsys", sub(r"fence\.release\.sys;", "membar.sys;")),
    ("relgpu", sub(r"fence\.release\.sys;", "fence.release.gpu;")),
    ("onesys", sub(r"fence\.release\.sys;(?=(?:(?!trap;).)*fence\.release\.sys;)", "fence.release.gpu;", re.S)),
    ("novol", sub(r"(ld|st)\.volatile\.global", r"\1.global")),
]
for name, f in variants:
    v = f(ptx)
    assert v != ptx, f"{name}: nothing replaced"
    open(f"{out}/checked_{name}.ptx", "w").write(v)
