"""Framework-pool checks for gasan (issue 18), run by scripts/gpu-python.sh under gasan-run and natively.

    python3 cases.py CASE

CASE is one of:
  cupy_overflow / cupy_clean    a CuPy RawKernel reads a[n] / a[n-1] of an n-float CuPy array
  torch_overflow / torch_clean  the same kernel on a PyTorch tensor, seen through DLPack
                                (cupy.from_dlpack): the tensor comes from PyTorch's allocator
  numba_overflow / numba_clean  a Numba @cuda.jit kernel reads a[n] / a[n-1] of a device array
  train                         a few steps of a small PyTorch MLP; prints the loop's seconds

Prints "result ok" at the end when the program ran through; exits 77 with "SKIPPED: ..." when a
framework it needs is not installed or there is no GPU. Under gasan an overflow case never gets
there: the report ends the program with exit status 1.
"""

import sys
import time

N = 1000  # floats: 4000-byte arrays

SRC = r"""
extern "C" __global__ void read_at(const float* a, long long i, float* out) { out[0] = a[i]; }
"""


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def need(name):
    try:
        return __import__(name)
    except Exception as e:  # ImportError, or a framework that fails without CUDA
        skip("%s not importable (%s: %s)" % (name, type(e).__name__, e))


def pool_state(cupy):
    # With the pool off (gasan-run's start-up hook), CuPy's default pool holds nothing.
    print("cupy_pool_used_bytes %d" % cupy.get_default_memory_pool().used_bytes())


def cupy_read(a_cupy, i):
    cupy = sys.modules["cupy"]
    k = cupy.RawKernel(SRC, "read_at")
    out = cupy.zeros(1, dtype=cupy.float32)
    k((1,), (1,), (a_cupy, cupy.int64(i), out))
    cupy.cuda.runtime.deviceSynchronize()
    return float(out[0])


def case_cupy(over):
    cupy = need("cupy")
    a = cupy.arange(N, dtype=cupy.float32)
    pool_state(cupy)
    v = cupy_read(a, N if over else N - 1)
    print("read %r" % v)


def case_torch(over):
    torch = need("torch")
    cupy = need("cupy")
    if not torch.cuda.is_available():
        skip("torch.cuda not available")
    t = torch.arange(N, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    print("torch_reserved_bytes %d" % torch.cuda.memory_reserved())
    a = cupy.from_dlpack(t)
    v = cupy_read(a, N if over else N - 1)
    print("read %r" % v)


def case_numba(over):
    need("numba")
    from numba import cuda
    import numpy as np

    if not cuda.is_available():
        skip("numba.cuda not available")

    @cuda.jit
    def read_at(a, i, out):
        out[0] = a[i]

    a = cuda.to_device(np.arange(N, dtype=np.float32))
    out = cuda.device_array(1, dtype=np.float32)
    read_at[1, 1](a, N if over else N - 1, out)
    cuda.synchronize()
    print("read %r" % float(out.copy_to_host()[0]))


def case_train():
    torch = need("torch")
    if not torch.cuda.is_available():
        skip("torch.cuda not available")
    torch.manual_seed(0)
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(1024, 256, device=dev)
    y = torch.randint(0, 10, (1024,), device=dev)
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    first = step().item()  # first launches (module loads, checks compiled) outside the timing
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        last = step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    last = last.item()
    print("loss %.4f -> %.4f" % (first, last))
    print("loop_seconds %.4f" % secs)
    if not last < first:
        print("loss did not go down")
        sys.exit(3)


CASES = {
    "cupy_overflow": lambda: case_cupy(True),
    "cupy_clean": lambda: case_cupy(False),
    "torch_overflow": lambda: case_torch(True),
    "torch_clean": lambda: case_torch(False),
    "numba_overflow": lambda: case_numba(True),
    "numba_clean": lambda: case_numba(False),
    "train": case_train,
}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit("usage: cases.py {%s}" % "|".join(CASES))
    CASES[sys.argv[1]]()
    print("result ok")
