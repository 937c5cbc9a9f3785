#!/usr/bin/env python3
"""A multi-MB PTX module for throughput measurements only (instrument/results.md, gpu-batch step
bigthreads): the 100-kernel startup module's functions repeated COPIES times (default 20), copy c's
kernels renamed `kern<c*10 K>` so every name stays unique. The 2.7 MB module measured on
2026-11-27 was made this way (from a corpus copy whose `.file` line named another checkout).
usage: make_big_ptx.py [KERNELS_PTX (default .cache/identical-corpus/benches_startup_kernels.ptx)] [COPIES] > big.ptx"""
import re
import sys

path = sys.argv[1] if len(sys.argv) > 1 else ".cache/identical-corpus/benches_startup_kernels.ptx"
copies = int(sys.argv[2]) if len(sys.argv) > 2 else 20
src = open(path).read()
first = src.index("\t// .globl")
head, body = src[:first], src[first:]
end = body.rindex("\n}\n") + 3  # after the last function; the `.file` lines follow
funcs, tail = body[:end], body[end:]
parts = [head]
for c in range(1, copies + 1):
    if c > 1:
        parts.append("\n\n")
    parts.append(re.sub(r"_Z4kernILi(\d+)E", lambda m: f"_Z4kernILi{c * 10}{m.group(1)}E", funcs))
parts.append(tail)
sys.stdout.write("".join(parts))
