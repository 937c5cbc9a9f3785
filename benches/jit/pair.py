#!/usr/bin/env python3
"""Checked against native Triton kernels in one process, launch by launch (issue 39).

Run under gasan-run. Each kernel of triton_bench.py exists twice: the kernels module as imported
(Triton compiles it through gasan's ptxas front end, so its cubin is checked) and a second copy
of the module compiled with the real ptxas (a native cubin, which gasan runs unchecked). Both run
on the same tensors, alternately, each launch timed by CUDA events, so a change of the machine's
speed during the run (clocks, a neighbour) moves both alike. run.py's steady state, which times
native and gasan in separate processes, cannot tell such a change from gasan's cost.

Prints, one per kernel:
    PAIR <name> native <µs> checked <µs> ratio <median of the per-pair ratios> checked_cubin <yes|no> outputs <same|differ>
and `PAIRS geomean <ratio>`. checked_cubin says whether the checked copy's cubin holds gasan's
control block and the native one does not; outputs whether one launch of each, from outputs
filled with NaN (zeros for integers), wrote the same values (within float tolerance: ptxas may
contract a multiply and an add differently in the two copies). Either `no` or `differ` makes the
kernel's row meaningless (a checked kernel that skips its work is fast), and the exit status 1.

Each launch's time includes the host's launch path where the GPU waits for it (Triton's launcher,
gasan's launch hook); with --queued, each launch is queued behind a busy-wait on the GPU, so the
time is the kernel's alone, and the difference between the two is host work per launch.

Usage: gasan-run -- python3 pair.py [--reps N] [--only a,b] [--queued]
"""

import importlib.util
import math
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import triton  # noqa: E402

import triton_bench as B  # noqa: E402

# The symbol every checked module declares (instrument/src/abi.rs CONTROL_BLOCK_SYMBOL).
CONTROL_BLOCK = b"__gasan_ctl"


def native_copy():
    """A second kernels module whose kernels Triton compiles with the real ptxas: fresh
    @triton.jit objects (the first copy's in-memory cache is per object), compiled while
    TRITON_PTXAS_PATH names the real tool (Triton reads it at each compile and keys its disk
    cache on the tool's --version answer, which gasan's front end changes)."""
    spec = importlib.util.spec_from_file_location("kernels_native", os.path.join(HERE, "..", "..", "jit", "triton", "kernels.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def real_ptxas():
    return os.environ.get("GASAN_REAL_PTXAS") or os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def first_launch(fn, ptxas):
    """Launches fn once with TRITON_PTXAS_PATH = ptxas and a cache directory of its own (None: as
    the process had them); the compiled kernel's cubin. (Triton computes the ptxas part of its
    cache key once per process, so in a shared cache the second copy would load the first one's
    cubin.)"""
    env = {"TRITON_PTXAS_PATH": ptxas, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="gasan-pair-")} if ptxas else {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        kernel = fn()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    torch.cuda.synchronize()
    return kernel.asm.get("cubin", b"") if kernel is not None and hasattr(kernel, "asm") else b""


def outputs_agree(outputs, checked, native):
    """Whether one launch of `checked` and one of `native` write the same `outputs`, each launch
    starting from outputs filled with NaN (integers: zero, so that an accumulating kernel counts
    from the same start)."""

    def launch(fn):
        for t in outputs:
            t.fill_(float("nan") if t.is_floating_point() else 0)
        fn()
        torch.cuda.synchronize()
        return [t.clone() for t in outputs]

    want, got = launch(native), launch(checked)
    return all(torch.allclose(w.float(), g.float(), rtol=1e-2, atol=1e-2) for w, g in zip(want, got))


def main():
    started = B.start(__doc__, 300, "--queued")
    if started is None:
        return 77
    a, only = started
    ratios, ok = [], True
    # The two copies launch on the same tensors: where a buffer lies can move a kernel's time
    # (the histogram's atomics), and must not be taken for the checks' cost.
    for name, case in B.cases(B.K, native_copy()).items():
        checked, native = case.launches
        if only and name not in only:
            continue
        good = CONTROL_BLOCK in first_launch(checked, None) and CONTROL_BLOCK not in first_launch(native, real_ptxas())
        same = outputs_agree(case.writes, checked, native)
        ok &= good and same
        for _ in range(5):
            checked()
            native()
        tn, tc, r = [], [], []
        for i in range(a.reps):
            # Alternate which goes first, so neither always follows the other.
            if i % 2:
                c, n = B.event_time(checked, a.queued), B.event_time(native, a.queued)
            else:
                n, c = B.event_time(native, a.queued), B.event_time(checked, a.queued)
            tn.append(n)
            tc.append(c)
            r.append(c / n)
        ratio = statistics.median(r)
        ratios.append(ratio)
        print(
            "PAIR %s native %.1f checked %.1f ratio %.3f checked_cubin %s outputs %s"
            % (name, statistics.median(tn), statistics.median(tc), ratio, "yes" if good else "no", "same" if same else "differ"),
            flush=True,
        )
    if ratios:
        print("PAIRS geomean %.3f over %d kernels" % (math.exp(sum(map(math.log, ratios)) / len(ratios)), len(ratios)), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
