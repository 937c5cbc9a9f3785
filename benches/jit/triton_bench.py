#!/usr/bin/env python3
"""One process of the Triton and torch.compile benchmark (issue 39): the CI's Triton kernels
(jit/triton/kernels.py) launched on PyTorch tensors at working sizes, and a small compiled model.

Prints, one per line:
    FIRST <name> <seconds>        the kernel's first launch (compile, or cache load, plus module load)
    STEADY <name> <microseconds>  median of the warmed-up kernel's time (CUDA events, --reps launches)
    COMPILE model <seconds>       torch.compile's first forward + backward
    STEP model <milliseconds>     median training step of the compiled model after warm-up
    TOTAL <seconds>               the whole process from import to the end

run.py runs it natively, under gasan-run and under compute-sanitizer, cold (empty Triton and
Inductor caches) and warm, and prints the table.

Usage: python3 triton_bench.py [--reps N] [--only a,b] [--no-model]
"""

import argparse
import collections
import os
import statistics
import sys
import time

T0 = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "jit", "triton"))

import torch  # noqa: E402
import triton  # noqa: E402

import kernels as K  # noqa: E402  (the CI's kernels: one set for the ahead-of-time check and this bench)


def timed(fn, reps):
    """(first call in s, median of reps calls in µs) of fn, each call timed by CUDA events around
    it (a training step's host work included: the end event is recorded after its last launch)."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    for _ in range(3):
        fn()
    return first, statistics.median(event_time(fn) for _ in range(reps))


# GPU cycles of the busy-wait queued ahead of a timed launch (`queued`): about 0.25 ms on an
# H100, more than a Triton launch's host path takes, so both events and the kernel are queued
# before the GPU reaches them.
QUEUE_CYCLES = 500_000


def event_time(fn, queued=False):
    """One call of fn in µs, timed by CUDA events around it. The time includes the host's launch
    path where the GPU waits for it; `queued`: behind a busy-wait on the GPU, so that it is the
    kernel's time alone."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if queued:
        torch.cuda._sleep(QUEUE_CYCLES)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1000.0


# One benchmark kernel: a launch per kernels module, and the tensors the kernel writes (pair.py
# compares what the checked and the native copy write).
Case = collections.namedtuple("Case", "launches writes")


def cases(*mods):
    """name -> Case: one closure per kernels module in `mods` (default: this one; pair.py passes
    a second copy), each launching that module's kernel on the same tensors, sized as real uses
    size them, and the kernel's output tensors."""
    mods = mods or (K,)
    dev = "cuda"
    out = {}
    n = 1 << 24
    x, y, z = (torch.randn(n, device=dev) for _ in range(3))
    out["vector_add"] = Case([lambda k=k: k.vector_add[(triton.cdiv(n, 1024),)](x, y, z, n, BLOCK=1024) for k in mods], [z])

    rows, cols = 4096, 1000
    a = torch.randn(rows, cols, device=dev)
    sm = torch.empty_like(a)
    out["softmax"] = Case([lambda k=k: k.softmax[(rows,)](sm, a, a.stride(0), sm.stride(0), cols, BLOCK=1024) for k in mods], [sm])

    ln_n = 4096
    lx = torch.randn(rows, ln_n, device=dev)
    ly = torch.empty_like(lx)
    w, b = torch.randn(ln_n, device=dev), torch.randn(ln_n, device=dev)
    mean, rstd = torch.empty(rows, device=dev), torch.empty(rows, device=dev)
    out["layernorm"] = Case([lambda k=k: k.layernorm[(rows,)](lx, ly, w, b, mean, rstd, lx.stride(0), ln_n, 1e-5, BLOCK=1024) for k in mods], [ly, mean, rstd])

    M = N = Kd = 2048
    ma = torch.randn(M, Kd, device=dev, dtype=torch.float16)
    mb = torch.randn(Kd, N, device=dev, dtype=torch.float16)
    mc = torch.empty(M, N, device=dev, dtype=torch.float16)
    grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
    out["matmul"] = Case([lambda k=k: k.matmul[grid](ma, mb, mc, M, N, Kd, ma.stride(0), ma.stride(1), mb.stride(0), mb.stride(1), mc.stride(0), mc.stride(1), BM=128, BN=128, BK=32) for k in mods], [mc])

    bh, ctx, d = 16, 1024, 64
    q, kk, v = (torch.randn(bh, ctx, d, device=dev, dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    out["attention_fwd"] = Case([lambda k=k: k.attention_fwd[(triton.cdiv(ctx, 64), bh)](q, kk, v, o, d, d, d, d, ctx, 0.125, BM=64, BN=64, D=d) for k in mods], [o])

    hx = torch.randint(0, 256, (n,), device=dev, dtype=torch.int32)
    bins = torch.zeros(256, device=dev, dtype=torch.int32)
    out["histogram"] = Case([lambda k=k: k.histogram[(triton.cdiv(n, 1024),)](hx, bins, n, 256, BLOCK=1024) for k in mods], [bins])
    return out


def model_step():
    """One training step of a compiled MLP (a function; its first call compiles)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.LayerNorm(4096), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    f = torch.compile(net)
    data = torch.randn(256, 1024, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        f(data).square().mean().backward()
        opt.step()

    return step


def model(steps):
    """The compiled MLP: (first step, compile included, in s; median step in ms)."""
    compile_s, step_us = timed(model_step(), steps)
    return compile_s, step_us / 1000.0


def start(doc, reps, *extra):
    """The arguments of a benchmark script (`--reps`, default `reps`; `--only`; `extra` flags) and
    the kernels `--only` names, or None when there is no CUDA device (said on stdout)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--only", default="")
    for flag in extra:
        ap.add_argument(flag, action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: torch.cuda not available")
        return None
    return a, set(filter(None, a.only.split(",")))


def main():
    started = start(__doc__, 50, "--no-model")
    if started is None:
        return 77
    a, only = started
    for name, case in cases().items():
        (fn,) = case.launches
        if only and name not in only:
            continue
        first, steady = timed(fn, a.reps)
        print("FIRST %s %.3f" % (name, first), flush=True)
        print("STEADY %s %.1f" % (name, steady), flush=True)
    if not a.no_model and (not only or "model" in only):
        c, s = model(max(5, a.reps // 5))
        print("COMPILE model %.3f" % c, flush=True)
        print("STEP model %.3f" % s, flush=True)
    print("TOTAL %.3f" % (time.perf_counter() - T0), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
