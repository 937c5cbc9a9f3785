"""Where a checked Triton kernel with one loop spends its instructions, no GPU needed (jit/FORMS.md,
item 7): compiles a kernel of kernels.py (optionally in the shape a launch specialises it to),
checks its PTX with gasan-ptx's default options, assembles both with the pinned ptxas, and counts
each SASS region on a clean launch's path: before the loop, the fast loop once (with its spill
reloads and its moves to uniform registers, `R2UR`, which native loops keep in them), after the loop.
Blocks that a forward branch skips and that hold a shadow load (LDG.E.U8) are the slow paths and
are not counted; a branch that leaves its region (Triton's `n <= 0` test) is not a slow path.

Usage (repository root): PYTHONPATH=$(scripts/triton.sh) python3 jit/triton/sass_regions.py [KERNEL]
KERNEL (a name in kernels.py's KERNELS) defaults to attention_fwd_hinted, the attention forward
as benches/jit/triton_bench.py launches it.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels as K  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sass(cuda, objdump, ptx, out):
    """The SASS instructions of `ptx` and their addresses."""
    subprocess.run([f"{cuda}/bin/ptxas", "-lineinfo", "--gpu-name=sm_90a", ptx, "-o", out + ".cubin"], check=True)
    text = subprocess.run([objdump, "-sass", out + ".cubin"], check=True, capture_output=True, text=True).stdout
    lines = [m for m in (re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;", l) for l in text.splitlines()) if m]
    return [m.group(2) for m in lines], [int(m.group(1), 16) for m in lines]


def path(ins, addr, lo, hi):
    index = {a: i for i, a in enumerate(addr)}
    skip = set()
    for i in range(lo, hi):
        m = re.search(r"BRA (0x[0-9a-f]+)", ins[i])
        j = index.get(int(m.group(1), 16)) if m and ins[i].startswith("@") else None
        if j is not None and i < j <= hi and any("LDG.E.U8" in x for x in ins[i + 1:j]):
            skip.update(range(i + 1, j))
    return hi - lo - len(skip)


def regions(ins, addr):
    index = {a: i for i, a in enumerate(addr)}
    loops = []
    for i, t in enumerate(ins):
        m = re.search(r"BRA (0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < addr[i] and i - index[int(m.group(1), 16)] > 10:
            loops.append((index[int(m.group(1), 16)], i))
    fast, last = loops[0], loops[-1]
    end = next(i for i, t in enumerate(ins) if "EXIT" in t and i > last[1])
    body = ins[fast[0]:fast[1] + 1]
    return path(ins, addr, 0, fast[0]), fast[1] - fast[0] + 1, sum("LDL" in t for t in body), sum("R2UR" in t for t in body), path(ins, addr, last[1] + 1, end + 1)


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "attention_fwd_hinted"
    cuda = os.environ.get("GASAN_CUDA_ROOT") or subprocess.run([f"{ROOT}/scripts/cuda-toolchain.sh"], check=True, capture_output=True, text=True).stdout.strip()
    objdump = os.path.join(os.path.dirname(K.triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TRITON_CACHE_DIR", f"{tmp}/cache")
        sys.argv = ["kernels.py", tmp, name]
        K.main()
        native = f"{tmp}/{name}.ptx"
        checked = f"{tmp}/{name}.checked.ptx"
        subprocess.run([f"{ROOT}/target/release/gasan-ptx", "instrument", "-o", checked, native], check=True, capture_output=True)
        print("| build | before the loop | fast loop | local loads in it | R2UR in it | after the loop |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, ptx in (("native", native), ("checked", checked)):
            ins, addr = sass(cuda, objdump, ptx, ptx)
            pre, loop, ldl, r2ur, post = regions(ins, addr)
            print(f"| {label} | {pre} | {loop} | {ldl} | {r2ur} | {post} |")


if __name__ == "__main__":
    main()
