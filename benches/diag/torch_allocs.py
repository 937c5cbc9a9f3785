"""How many tensors one training step of benches/jit/triton_bench.py's compiled model allocates,
by PyTorch's size classes (its caching allocator's small pool: blocks of at most 1 MiB; large
pool: the rest), and their bytes: under gasan each is its own pool allocation and free
(`framework_pools=1` turns the caching allocator off), so this times benches/diag/alloc_cost.cu's
per-size figures into the step's cost. Run natively (the caching allocator's counters are what
it reads).   python3 benches/diag/torch_allocs.py [STEPS]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jit"))
import triton_bench  # noqa: E402


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    step = triton_bench.model_step()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    keys = ["allocation.small_pool.allocated", "allocation.large_pool.allocated", "allocated_bytes.small_pool.allocated", "allocated_bytes.large_pool.allocated"]
    before = {k: torch.cuda.memory_stats().get(k, 0) for k in keys}
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    after = {k: torch.cuda.memory_stats().get(k, 0) for k in keys}
    d = {k: (after[k] - before[k]) / steps for k in keys}
    print("TORCH_ALLOCS per step: small %.1f (%.0f bytes), large %.1f (%.0f bytes)" % (d[keys[0]], d[keys[2]], d[keys[1]], d[keys[3]]))


if __name__ == "__main__":
    main()
