"""NCCL on one GPU, and on every GPU of one process (issue 40 item 4), run by run_groups.py natively and under gasan-run: gasan checks
the buffers of NCCL's calls on the host (runtime/src/hooks/nccl.rs), so an over-long count is
reported as a host call named after the NCCL function and buffer.

    python3 nccl_cases.py CASE [BIN_DIR]

CASE is one of:
  c_allreduce_overflow   nccl_allreduce.cu (built by build_programs.sh into BIN_DIR): a one-rank
                         ncclCommInitAll communicator, ncclAllReduce of N + 1 floats into a receive
                         buffer of N; gasan: heap-buffer-overflow, WRITE by "ncclAllReduce (recvbuff)"
  c_allreduce_clean      the same with N
  c_allgpus_allreduce_overflow, c_allgpus_allreduce_clean
                         the same over every GPU in one process (ncclCommInitAll, one ncclAllReduce
                         per GPU in a group): only the last GPU's receive buffer is short
  torch_allreduce_overflow  torch.distributed, backend nccl, world_size 1: the tensor's storage is
                         shrunk by one element (untyped_storage().resize_: PyTorch keeps the tensor's
                         size and checks neither) before dist.all_reduce; in place, so gasan reports
                         the READ of "ncclAllReduce (sendbuff)" first
  torch_allreduce_clean  the same all-reduce without the shrink

The C program gets PyTorch's libnccl.so.2 (the nvidia-nccl wheel) by path, else the system's.
Prints "result ok" at the end; exits 77 with "SKIPPED: ..." when the GPU, NCCL, PyTorch or the
program is missing.
"""

import os
import sys

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)
N = 1000


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def libnccl():
    """PyTorch's libnccl.so.2 (site-packages/nvidia/nccl/lib), else the name for the loader's search."""
    try:
        import nvidia.nccl
        for d in nvidia.nccl.__path__:
            p = os.path.join(d, "lib", "libnccl.so.2")
            if os.path.exists(p):
                return p
    except ImportError:
        pass
    return "libnccl.so.2"


def c_program(clean, all_gpus=False):
    if len(sys.argv) < 3:
        sys.exit("usage: nccl_cases.py %s BIN_DIR" % sys.argv[1])
    prog = os.path.join(sys.argv[2], "nccl_allreduce")
    if not os.access(prog, os.X_OK):
        skip("%s not built (runtime/gpu/python/build_programs.sh)" % prog)
    sys.stdout.flush()
    # The program's own output and exit status are the case's ("result ok", a report, 77).
    os.execv(prog, [prog] + (["clean"] if clean else []) + (["all"] if all_gpus else []) + [libnccl()])


def c_allreduce_overflow():
    c_program(clean=False)


def c_allreduce_clean():
    c_program(clean=True)


def c_allgpus_allreduce_overflow():
    c_program(clean=False, all_gpus=True)


def c_allgpus_allreduce_clean():
    c_program(clean=True, all_gpus=True)


def torch_allreduce(shrink):
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:
        skip("torch not importable (%s)" % e)
    if not torch.cuda.is_available():
        skip("torch.cuda not available")
    if not dist.is_nccl_available():
        skip("this PyTorch has no NCCL backend")
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    try:
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=dev)
    except TypeError:  # PyTorch before 2.3: no device_id (the communicator is made at the first call)
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.arange(N, dtype=torch.float32, device=dev)
    want = t.clone()
    if shrink:
        # The storage (a new, shorter allocation) holds N - 1 floats; the tensor still says N.
        t.untyped_storage().resize_((N - 1) * t.element_size())  # BUG:torch_allreduce_overflow
    dist.all_reduce(t)
    torch.cuda.synchronize()
    # One rank: the sum is the tensor itself (the shrunk one is not read back: past its storage).
    same = shrink or torch.equal(t.cpu(), want.cpu())
    dist.destroy_process_group()
    if not same:
        print("the one-rank all-reduce changed the tensor")
        sys.exit(3)


def torch_allreduce_overflow():
    torch_allreduce(shrink=True)


def torch_allreduce_clean():
    torch_allreduce(shrink=False)


CASES = {
    "c_allreduce_overflow": c_allreduce_overflow,
    "c_allreduce_clean": c_allreduce_clean,
    "c_allgpus_allreduce_overflow": c_allgpus_allreduce_overflow,
    "c_allgpus_allreduce_clean": c_allgpus_allreduce_clean,
    "torch_allreduce_overflow": torch_allreduce_overflow,
    "torch_allreduce_clean": torch_allreduce_clean,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        sys.exit("usage: nccl_cases.py {%s} [BIN_DIR]" % "|".join(CASES))
    CASES[sys.argv[1]]()
    print("result ok")
