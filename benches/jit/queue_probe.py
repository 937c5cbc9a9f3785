#!/usr/bin/env python3
"""Per-launch cost with the launch queue kept full: each benchmark kernel launched N times between
two CUDA events (no synchronisation in between), against one launch timed alone as
triton_bench.py times it. When the batched figure is far below the single one, the difference is
host work per launch, not kernel time.

Usage: python3 queue_probe.py [N]
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import triton_bench as B  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
for name, case in B.cases().items():
    (fn,) = case.launches
    fn()
    torch.cuda.synchronize()
    singles = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        singles.append(s.elapsed_time(e) * 1000.0)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record(); e.synchronize()
    print(f"QUEUE {name} single {statistics.median(singles):.1f} us, batched {s.elapsed_time(e) * 1000.0 / n:.1f} us per launch")
