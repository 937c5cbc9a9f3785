"""Triton kernels written from the memory-bug classes of issue 39, each used by a case of jit_cases.py
with a clean twin. A `# BUG:<case>` comment marks the Python line a gasan report of that case must
name (Triton's PTX carries `.loc` for these lines; keep each access on one line).

Importable without a GPU. Ahead of time (no GPU, scripts/triton.sh's pinned Triton):

    python3 triton_bugs.py --aot OUT_DIR

compiles every kernel below for sm_90a through the ptxas Triton is pointed at (TRITON_PTXAS_PATH,
gasan-ptxas in aot_check.sh) and writes <kernel>.ptx, <kernel>.cubin and <kernel>.json to OUT_DIR.
"""

import json
import os
import sys

import triton
import triton.language as tl


@triton.jit
def copy_masked(x, out, n, BLOCK: tl.constexpr):
    """The clean twin of the mask cases: both accesses masked by `offs < n`."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)  # BUG:triton_uaf
    tl.store(out + offs, v, mask=offs < n)  # BUG:torch_compile_overflow


@triton.jit
def load_mask_le(x, out, n, BLOCK: tl.constexpr):
    """Off-by-one mask on the load: `<=` reads x[n]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs <= n, other=0.0)  # BUG:triton_mask_load
    tl.store(out + offs, v, mask=offs < n)


@triton.jit
def store_mask_le(x, out, n, BLOCK: tl.constexpr):
    """Off-by-one mask on the store: `<=` writes out[n]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)
    tl.store(out + offs, v * 2.0, mask=offs <= n)  # BUG:triton_mask_store


@triton.jit
def rows_scale_wrong_dim(x, out, n_rows, n_cols, BLOCK: tl.constexpr):
    """Mask computed for the wrong dimension: columns bounded by n_rows (> n_cols here)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * n_cols + cols, mask=cols < n_rows, other=0.0)  # BUG:triton_wrong_dim
    tl.store(out + row * n_cols + cols, v * 3.0, mask=cols < n_cols)


@triton.jit
def rows_scale(x, out, n_rows, n_cols, BLOCK: tl.constexpr):
    """The clean twin of rows_scale_wrong_dim."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out + row * n_cols + cols, v * 3.0, mask=cols < n_cols)


@triton.jit
def rows_copy(x, out, stride_x, stride_out, n_cols, BLOCK: tl.constexpr):
    """Row copy of a 2-D view by its row strides; the caller's stride is the bug (a padded pitch
    assumed for a tensor whose storage is not padded)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * stride_x + cols, mask=cols < n_cols, other=0.0)  # BUG:triton_stride
    tl.store(out + row * stride_out + cols, v, mask=cols < n_cols)


@triton.jit
def rows_fill(out, stride_out, n_cols, value, BLOCK: tl.constexpr):
    """One program per row; the caller's grid has one row too many."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(out + row * stride_out + cols, value, mask=cols < n_cols)  # BUG:triton_row_past


@triton.jit
def histogram_unclamped(x, bins, n, n_bins, BLOCK: tl.constexpr):
    """Bins of values in [0, 1]: a value of exactly 1.0 lands in bin n_bins, one past the histogram."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m, other=0.0)
    b = (v * n_bins).to(tl.int32)
    tl.atomic_add(bins + b, 1, mask=m)  # BUG:triton_atomic_past


@triton.jit
def masked_far(x, out, n, BLOCK: tl.constexpr):
    """Masked-off lanes hold pointers 16 MiB past the tensor: they must never be reported."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    far = tl.where(m, offs, offs + (1 << 22))
    v = tl.load(x + far, mask=m, other=1.0)
    tl.store(out + far, v + 1.0, mask=m)
    tl.atomic_add(out + far, 0.0, mask=m)


@triton.jit
def matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """tl.dot matmul; the caller's C is one element short."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a_t = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b_t = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_t, b_t)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))  # BUG:triton_dot_small


BLOCK = 256
VEC = {"x": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ROWS = {"x": "*fp32", "out": "*fp32", "n_rows": "i32", "n_cols": "i32", "BLOCK": "constexpr"}
MM = {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32", "sam": "i32", "sak": "i32",
      "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
MM_TILE = {"BM": 64, "BN": 64, "BK": 32}

# Ahead-of-time compiles (the signatures the cases launch with): name -> (kernel, signature, constexprs).
AOT = {
    "copy_masked": (copy_masked, VEC, {"BLOCK": BLOCK}),
    "load_mask_le": (load_mask_le, VEC, {"BLOCK": BLOCK}),
    "store_mask_le": (store_mask_le, VEC, {"BLOCK": BLOCK}),
    "rows_scale_wrong_dim": (rows_scale_wrong_dim, ROWS, {"BLOCK": 64}),
    "rows_scale": (rows_scale, ROWS, {"BLOCK": 64}),
    "rows_copy": (rows_copy, {"x": "*fp32", "out": "*fp32", "stride_x": "i32", "stride_out": "i32", "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}),
    "rows_fill": (rows_fill, {"out": "*fp32", "stride_out": "i32", "n_cols": "i32", "value": "fp32", "BLOCK": "constexpr"}, {"BLOCK": 128}),
    "histogram_unclamped": (histogram_unclamped, {"x": "*fp32", "bins": "*i32", "n": "i32", "n_bins": "i32", "BLOCK": "constexpr"}, {"BLOCK": BLOCK}),
    "masked_far": (masked_far, VEC, {"BLOCK": BLOCK}),
    "matmul": (matmul, MM, MM_TILE),
}


def aot(out_dir, arch=90):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.makedirs(out_dir, exist_ok=True)
    for name, (fn, sig, consts) in AOT.items():
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", arch, 32))
        with open(os.path.join(out_dir, name + ".ptx"), "w") as f:
            f.write(k.asm["ptx"])
        with open(os.path.join(out_dir, name + ".cubin"), "wb") as f:
            f.write(k.asm["cubin"])
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump({"name": k.metadata.name, "hash": k.metadata.hash}, f)
        print(f"{name}: {len(k.asm['cubin'])} bytes of cubin")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--aot":
        sys.exit("usage: triton_bugs.py --aot OUT_DIR")
    aot(sys.argv[2])
