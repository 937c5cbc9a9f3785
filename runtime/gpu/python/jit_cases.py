"""Kernels compiled at run time (issue 39), each bug with its clean twin: Triton kernels launched on
PyTorch tensors (triton_bugs.py), torch.compile (Inductor), jax.jit (and a Pallas kernel), Numba
@cuda.jit. Run by run_groups.py natively, under gasan-run and under compute-sanitizer; expectations
(report kind, kernel, Python line by its `# BUG:<case>` marker) are in expectations.json.

    python3 jit_cases.py CASE

Prints "result ok" when the program ran through; exits 77 with "SKIPPED: ..." when a framework it
needs is missing or there is no GPU. Under gasan a reported case ends with exit status 1 first.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

N = 1000  # elements: 4000-byte float tensors, not a multiple of the 256-wide Triton block


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def need(name):
    try:
        return __import__(name)
    except Exception as e:  # ImportError, or a framework that fails to start without CUDA
        skip("%s not importable (%s: %s)" % (name, type(e).__name__, e))


def torch_cuda():
    torch = need("torch")
    need("triton")
    if not torch.cuda.is_available():
        skip("torch.cuda not available")
    return torch


def tb():
    import triton_bugs
    return triton_bugs


def sync_and_show(torch, t):
    torch.cuda.synchronize()
    print("checksum %.3f" % float(t.double().sum()))


def cdiv(a, b):
    return (a + b - 1) // b


# --- Triton ---------------------------------------------------------------------------------------

def triton_mask(over, which):
    torch = torch_cuda()
    k = tb()
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N, dtype=torch.float32, device="cuda")
    kern = {"load": k.load_mask_le, "store": k.store_mask_le}[which] if over else k.copy_masked
    kern[(cdiv(N, k.BLOCK),)](x, out, N, BLOCK=k.BLOCK)
    sync_and_show(torch, out)


def triton_wrong_dim(over):
    torch = torch_cuda()
    k = tb()
    rows, cols = 64, 48  # the wrong dimension (rows) is the larger: the last row reads past x
    x = torch.ones(rows * cols, dtype=torch.float32, device="cuda")
    out = torch.zeros(rows * cols, dtype=torch.float32, device="cuda")
    (k.rows_scale_wrong_dim if over else k.rows_scale)[(rows,)](x, out, rows, cols, BLOCK=64)
    sync_and_show(torch, out)


def triton_stride(over):
    torch = torch_cuda()
    k = tb()
    rows, cols = 32, 100
    x = torch.ones(rows, cols, dtype=torch.float32, device="cuda")
    out = torch.zeros(rows, cols, dtype=torch.float32, device="cuda")
    # The bug: a pitch padded to a power of two assumed for x, whose rows are not padded.
    stride_x = 128 if over else x.stride(0)
    k.rows_copy[(rows,)](x, out, stride_x, out.stride(0), cols, BLOCK=128)
    sync_and_show(torch, out)


def triton_row_past(over):
    torch = torch_cuda()
    k = tb()
    rows, cols = 40, 100
    out = torch.zeros(rows, cols, dtype=torch.float32, device="cuda")
    grid = (rows + 1,) if over else (rows,)  # the bug: one program per row, plus one
    k.rows_fill[grid](out, out.stride(0), cols, 2.0, BLOCK=128)
    sync_and_show(torch, out)


def triton_atomic_past(over):
    torch = torch_cuda()
    k = tb()
    n_bins = 64
    # Values in [0, 1] (over) or [0, 1) (clean): 1.0 falls in bin n_bins.
    x = torch.linspace(0.0, 1.0 if over else 0.999, N, dtype=torch.float32, device="cuda")
    bins = torch.zeros(n_bins, dtype=torch.int32, device="cuda")
    k.histogram_unclamped[(cdiv(N, k.BLOCK),)](x, bins, N, n_bins, BLOCK=k.BLOCK)
    sync_and_show(torch, bins)


def triton_masked_far():
    torch = torch_cuda()
    k = tb()
    x = torch.ones(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N, dtype=torch.float32, device="cuda")
    k.masked_far[(cdiv(N, k.BLOCK),)](x, out, N, BLOCK=k.BLOCK)
    sync_and_show(torch, out)


def triton_dot_small(over):
    torch = torch_cuda()
    k = tb()
    M = Nn = K = 128
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    b = torch.randn(K, Nn, dtype=torch.float16, device="cuda")
    # The bug: C's storage one element short of M x N (the kernel is handed M and N of A and B).
    c_store = torch.empty(M * Nn - (1 if over else 0), dtype=torch.float16, device="cuda")
    t = k.MM_TILE
    k.matmul[(cdiv(M, t["BM"]), cdiv(Nn, t["BN"]))](a, b, c_store, M, Nn, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), Nn, 1, **t)
    torch.cuda.synchronize()
    if not over:
        err = (c_store.view(M, Nn).float() - (a.float() @ b.float())).abs().max().item()
        print("max error %.4f" % err)
        if err > 0.5:
            sys.exit(3)
    sync_and_show(torch, c_store)


class RawPointer:
    """What Triton's launcher reads of a tensor argument: its address and element type."""

    def __init__(self, ptr, dtype):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self):
        return self.ptr


def triton_uaf(over):
    torch = torch_cuda()
    k = tb()
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N, dtype=torch.float32, device="cuda")
    src = RawPointer(x.data_ptr(), x.dtype)
    if over:
        # The bug: the tensor is gone (gasan-run turns PyTorch's caching allocator off, so this
        # frees it; natively the cache keeps the bytes mapped), its address is still used.
        del x
        torch.cuda.synchronize()
    k.copy_masked[(cdiv(N, k.BLOCK),)](src, out, N, BLOCK=k.BLOCK)
    sync_and_show(torch, out)


# --- torch.compile ---------------------------------------------------------------------------------

def compiled_op(torch):
    """A Triton kernel as a custom op in a compiled graph (torch.library.triton_op, PyTorch >= 2.6)."""
    k = tb()
    try:
        from torch.library import triton_op, wrap_triton
    except ImportError:
        skip("torch.library.triton_op not in this PyTorch")

    @triton_op("gasan_tests::copy_into", mutates_args={"out"})
    def copy_into(x: torch.Tensor, out: torch.Tensor) -> None:
        n = x.numel()  # the bug when out is shorter: the kernel is bounded by x alone
        wrap_triton(k.copy_masked)[(cdiv(n, k.BLOCK),)](x, out, n, BLOCK=k.BLOCK)

    return torch.ops.gasan_tests.copy_into


def torch_compile_overflow(over):
    torch = torch_cuda()
    op = compiled_op(torch)

    @torch.compile(fullgraph=True)
    def f(x, out):
        op(x * 2.0 + 1.0, out)
        return out.sum()

    x = torch.arange(N, dtype=torch.float32, device="cuda")
    out = torch.zeros(N - 1 if over else N, dtype=torch.float32, device="cuda")
    s = f(x, out)
    torch.cuda.synchronize()
    print("sum %.1f" % float(s))


def torch_compile_train():
    torch = torch_cuda()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cmodel = torch.compile(model)
    x = torch.randn(1024, 256, device="cuda")
    y = torch.randint(0, 10, (1024,), device="cuda")
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = lossf(torch.softmax(cmodel(x), -1).log(), y)
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    first = step().item()  # compiles forward and backward (Triton through the front end)
    torch.cuda.synchronize()
    print("compile_seconds %.3f" % (time.perf_counter() - t0))
    t0 = time.perf_counter()
    for _ in range(10):
        last = step()
    torch.cuda.synchronize()
    print("loop_seconds %.4f" % (time.perf_counter() - t0))
    last = last.item()
    print("loss %.4f -> %.4f" % (first, last))
    if not last < first:
        print("loss did not go down")
        sys.exit(3)


# --- JAX -------------------------------------------------------------------------------------------

def jax_gpu():
    jax = need("jax")
    try:
        if not jax.devices("gpu"):
            skip("JAX sees no GPU")
    except RuntimeError as e:
        skip("JAX sees no GPU (%s)" % e)
    return jax


def jax_jit_clean():
    jax = jax_gpu()
    jnp = jax.numpy

    @jax.jit
    def f(w, x):
        h = jax.nn.gelu(x @ w)
        return jax.nn.softmax(h, axis=-1).sum(axis=0)

    w = jnp.ones((256, 128), jnp.float32) / 256
    x = jnp.arange(512 * 256, dtype=jnp.float32).reshape(512, 256) / 1e5
    r = f(w, x).block_until_ready()
    print("sum %.3f" % float(r.sum()))
    if abs(float(r.sum()) - 512.0) > 1e-2:
        sys.exit(3)


def jax_pallas_read(over):
    """A Pallas kernel (Triton lowering on the GPU) reading a window one element too far."""
    jax = jax_gpu()
    jnp = jax.numpy
    try:
        from jax.experimental import pallas as pl
    except Exception as e:
        skip("jax.experimental.pallas not importable (%s)" % e)
    n, block = 1024, 256
    shift = 1 if over else 0

    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(i * block, block)] = x_ref[pl.ds(i * block + shift, block)] * 2.0  # BUG:jax_pallas_read

    x = jnp.arange(n, dtype=jnp.float32)
    out_shape = jax.ShapeDtypeStruct((n,), jnp.float32)
    try:  # compiled apart from the run, so that only a lowering failure is a skip
        try:
            call = pl.pallas_call(kernel, out_shape=out_shape, grid=(n // block,), backend="triton")
        except TypeError:  # a JAX whose pallas_call has no backend choice (Triton on GPUs)
            call = pl.pallas_call(kernel, out_shape=out_shape, grid=(n // block,))
        compiled = jax.jit(call).lower(x).compile()
    except Exception as e:
        skip("Pallas cannot lower this kernel here (%s: %s)" % (type(e).__name__, str(e)[:120]))
    r = compiled(x).block_until_ready()
    print("sum %.1f" % float(r.sum()))


def triton_tma(over):
    """A host-built TMA descriptor (Triton encodes it with cuTensorMapEncodeTiled at launch) whose
    shape claims 16 more rows than the tensor holds: gasan reports it at the encode, by host call."""
    torch = torch_cuda()
    import triton
    import triton.language as tl
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        skip("this Triton has no host tensor descriptors")
    if torch.cuda.get_device_capability()[0] < 9:
        skip("TMA needs sm_90 or newer")

    @triton.jit
    def tma_rows_copy(in_desc, out, cols, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        tile = in_desc.load([pid * BM, 0])
        offs = (pid * BM + tl.arange(0, BM))[:, None] * cols + tl.arange(0, BN)[None, :]
        tl.store(out + offs, tile)

    rows, cols, bm = 64, 32, 16
    claimed = rows + 16 if over else rows
    x = torch.ones(rows * cols, dtype=torch.float32, device="cuda")
    out = torch.zeros(claimed * cols, dtype=torch.float32, device="cuda")
    desc = TensorDescriptor(x, shape=[claimed, cols], strides=[cols, 1], block_shape=[bm, cols])  # BUG:triton_tma_overflow
    tma_rows_copy[(cdiv(claimed, bm),)](desc, out, cols, BM=bm, BN=cols)
    sync_and_show(torch, out)


# --- Numba -----------------------------------------------------------------------------------------

def numba_write(over):
    need("numba")
    from numba import cuda
    import numpy as np

    if not cuda.is_available():
        skip("numba.cuda not available")

    @cuda.jit(lineinfo=True)
    def fill_upto(out, n):
        i = cuda.grid(1)
        if i <= n:  # the bug: one past (the clean twin passes n - 1)
            out[i] = i  # BUG:numba_overflow

    out = cuda.device_array(N, dtype=np.float32)
    fill_upto[cdiv(N + 1, 128), 128](out, N if over else N - 1)
    cuda.synchronize()
    print("checksum %.1f" % float(out.copy_to_host().sum()))


CASES = {
    "triton_mask_load": lambda: triton_mask(True, "load"),
    "triton_mask_store": lambda: triton_mask(True, "store"),
    "triton_mask_clean": lambda: triton_mask(False, None),
    "triton_wrong_dim": lambda: triton_wrong_dim(True),
    "triton_wrong_dim_clean": lambda: triton_wrong_dim(False),
    "triton_stride": lambda: triton_stride(True),
    "triton_stride_clean": lambda: triton_stride(False),
    "triton_row_past": lambda: triton_row_past(True),
    "triton_row_past_clean": lambda: triton_row_past(False),
    "triton_atomic_past": lambda: triton_atomic_past(True),
    "triton_atomic_past_clean": lambda: triton_atomic_past(False),
    "triton_masked_far_clean": triton_masked_far,
    "triton_dot_small": lambda: triton_dot_small(True),
    "triton_dot_small_clean": lambda: triton_dot_small(False),
    "triton_uaf": lambda: triton_uaf(True),
    "triton_uaf_clean": lambda: triton_uaf(False),
    "torch_compile_overflow": lambda: torch_compile_overflow(True),
    "torch_compile_overflow_clean": lambda: torch_compile_overflow(False),
    "torch_compile_train": torch_compile_train,
    "jax_jit_clean": jax_jit_clean,
    "jax_pallas_read": lambda: jax_pallas_read(True),
    "jax_pallas_read_clean": lambda: jax_pallas_read(False),
    "triton_tma_overflow": lambda: triton_tma(True),
    "triton_tma_overflow_clean": lambda: triton_tma(False),
    "numba_overflow": lambda: numba_write(True),
    "numba_overflow_clean": lambda: numba_write(False),
}

def run_case(cases, argv):
    """Runs the case argv[1] names and prints "result ok" when it ran through."""
    if len(argv) != 2 or argv[1] not in cases:
        sys.exit("usage: %s {%s}" % (os.path.basename(argv[0]), "|".join(cases)))
    cases[argv[1]]()
    print("result ok")


if __name__ == "__main__":
    run_case(CASES, sys.argv)
