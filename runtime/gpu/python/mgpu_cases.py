"""Multi-GPU and multi-process PyTorch programs (issue 40), run by run_groups.py natively and under
gasan-run; all clean (no report is the expectation), timed against native.

    python3 mgpu_cases.py CASE

CASE is one of:
  ddp_train  torch.distributed with the NCCL backend, 2 ranks (one process per GPU): a small MLP in
             DistributedDataParallel, a few steps of all-reduced gradients; prints loop_seconds
  mp_share   torch.multiprocessing: a CUDA tensor sent to a child process (CUDA IPC underneath),
             which adds to it in place; the parent sees the sum. PyTorch shares only tensors of its
             caching allocator (`_share_cuda_` raises "invalid device pointer" for the uncached
             allocations PYTORCH_NO_CUDA_MEMORY_CACHING gives), so under gasan it runs with
             --framework-pools 0 (expectations.json); a send that fails ends both processes at once
  dp_train   one process, 2 GPUs: torch.nn.DataParallel (NCCL broadcast and reduce in one
             process), a few steps; prints loop_seconds
  jax_psum   one process, every GPU: jax.pmap with a psum (XLA's NCCL all-reduce)

NVLink multicast stays off (the multi-GPU machines require it): the variables below are forced in
this process and so in every process it starts.
Prints "result ok" at the end; exits 77 with "SKIPPED: ..." when PyTorch, CUDA or a second GPU is
missing.
"""

import os
import sys
import time

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def need_torch(gpus):
    try:
        import torch
    except Exception as e:
        skip("torch not importable (%s)" % e)
    if not torch.cuda.is_available():
        skip("torch.cuda not available")
    if torch.cuda.device_count() < gpus:
        skip("needs %d GPUs, this machine has %d" % (gpus, torch.cuda.device_count()))
    return torch


def ddp_rank(rank, world, port, steps):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    torch.manual_seed(1 + rank)  # each rank its own data
    x = torch.randn(2048, 512, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = lossf(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    first = step().item()  # NCCL's communicators and buffers set up outside the timing
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        last = step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    # The ranks' weights must agree after all-reduced gradients.
    w = model[0].weight.detach().clone()
    dist.all_reduce(w, op=dist.ReduceOp.MAX)
    same = torch.equal(w, model[0].weight.detach())
    dist.destroy_process_group()
    if rank == 0:
        print("loss %.4f -> %.4f" % (first, last.item()))
        print("loop_seconds %.4f" % secs)
    if not same:
        print("rank %d: weights differ from the other rank's" % rank)
        sys.exit(3)


def ddp_train():
    torch = need_torch(2)
    import socket
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_rank, args=(2, port, 20), nprocs=2, join=True)


def mp_child(conn):
    try:
        t = conn.recv()
    except EOFError:  # the parent could not send the tensor (it says why) and closed its end
        sys.exit(4)
    t.add_(1.0)
    import torch
    torch.cuda.synchronize()
    conn.send(float(t.sum()))


def mp_share():
    torch = need_torch(1)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    t = torch.zeros(1000, dtype=torch.float32, device="cuda")
    p = ctx.Process(target=mp_child, args=(child,))
    p.start()
    child.close()
    # A pipe pickles the tensor on this thread: a failed share raises here. (A Queue pickles on
    # its feeder thread, which prints the error and drops the item: the child then waits for ever
    # and the parent until its timeout.)
    try:
        parent.send(t)
    except Exception as e:
        print("cannot share the CUDA tensor: %s: %s" % (type(e).__name__, e))
        if "PYTORCH_NO_CUDA_MEMORY_CACHING" in os.environ:
            print("PYTORCH_NO_CUDA_MEMORY_CACHING is set: PyTorch shares only its caching allocator's tensors (under gasan: --framework-pools 0)")
        parent.close()
        p.join(30)
        sys.exit(3)
    if not parent.poll(45):
        print("no answer from the child in 45 s")
        p.kill()
        sys.exit(3)
    try:
        child_sum = parent.recv()
    except EOFError:
        child_sum = None
    p.join(30)
    torch.cuda.synchronize()
    print("child saw %s, parent sees %.1f" % (child_sum, float(t.sum())))
    if p.exitcode != 0 or child_sum != 1000.0 or float(t.sum()) != 1000.0:
        print("the shared tensor was not updated (child exit %s)" % p.exitcode)
        sys.exit(3)


def dp_train():
    torch = need_torch(2)
    torch.manual_seed(0)
    model = torch.nn.DataParallel(torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda(), device_ids=[0, 1])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(4096, 512, device="cuda")
    y = torch.randint(0, 10, (4096,), device="cuda")
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    first = step().item()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        last = step()
    torch.cuda.synchronize()
    print("loop_seconds %.4f" % (time.perf_counter() - t0))
    print("loss %.4f -> %.4f" % (first, last.item()))
    if not last.item() < first:
        print("loss did not go down")
        sys.exit(3)


def jax_psum():
    try:
        import jax
    except Exception as e:
        skip("jax not importable (%s)" % e)
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        skip("JAX sees no GPU (%s)" % e)
    if len(gpus) < 2:
        skip("needs 2 GPUs, JAX sees %d" % len(gpus))
    n = len(gpus)
    xs = jax.numpy.arange(n * 1024, dtype=jax.numpy.float32).reshape(n, 1024)
    r = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(xs).block_until_ready()
    want = float(xs.sum(axis=0)[7])
    print("psum over %d GPUs: %.1f (want %.1f)" % (n, float(r[n - 1][7]), want))
    if float(r[n - 1][7]) != want:
        sys.exit(3)


CASES = {"ddp_train": ddp_train, "mp_share": mp_share, "dp_train": dp_train, "jax_psum": jax_psum}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit("usage: mgpu_cases.py {%s}" % "|".join(CASES))
    CASES[sys.argv[1]]()
    print("result ok")
