"""Triton kernels compiled ahead of time, without a GPU, for gasan's CI (scripts/test.d/25-triton.sh).

Each kernel is compiled for sm_90a with `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`,
through whatever ptxas Triton is pointed at (TRITON_PTXAS_PATH: gasan-ptxas in CI). For each one the
PTX Triton made (`<name>.ptx`), the cubin (`<name>.cubin`) and the kernel's metadata go to OUT_DIR.

Usage: python3 kernels.py [--arch CC] OUT_DIR [NAME...]   (CC: compute capability, 90 by default;
100 and newer go through Triton's ptxas-blackwell)
"""

import json
import os
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def vector_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def softmax(out, inp, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(inp + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out + row * out_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def layernorm(x, y, w, b, mean, rstd, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x += row * stride
    y += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x + cols, mask=cols < n, other=0.0).to(tl.float32)
    mu = tl.sum(acc, axis=0) / n
    var_acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        v = tl.load(x + cols, mask=cols < n, other=0.0).to(tl.float32)
        v = tl.where(cols < n, v - mu, 0.0)
        var_acc += v * v
    r = 1 / tl.sqrt(tl.sum(var_acc, axis=0) / n + eps)
    tl.store(mean + row, mu)
    tl.store(rstd + row, r)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = cols < n
        v = tl.load(x + cols, mask=m, other=0.0).to(tl.float32)
        out = (v - mu) * r * tl.load(w + cols, mask=m) + tl.load(b + cols, mask=m)
        tl.store(y + cols, out, mask=m)


@triton.jit
def matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
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
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attention_fwd(q, k, v, o, sqm, skn, svn, som, n_ctx, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * n_ctx * D
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    qt = tl.load(q + base + offs_m[:, None] * sqm + offs_d[None, :], mask=offs_m[:, None] < n_ctx, other=0.0)
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for start_n in range(0, n_ctx, BN):
        cols = start_n + offs_n
        kt = tl.load(k + base + cols[None, :] * skn + offs_d[:, None], mask=cols[None, :] < n_ctx, other=0.0)
        qk = tl.dot(qt, kt) * scale
        qk = tl.where(cols[None, :] < n_ctx, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(v + base + cols[:, None] * svn + offs_d[None, :], mask=cols[:, None] < n_ctx, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o + base + offs_m[:, None] * som + offs_d[None, :], acc.to(o.dtype.element_ty), mask=offs_m[:, None] < n_ctx)


@triton.jit
def histogram(x, bins, n, n_bins, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m, other=0)
    tl.atomic_add(bins + v, 1, mask=m & (v < n_bins))


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a_t = a_desc.load([pid_m * BM, k])
        b_t = b_desc.load([k, pid_n * BN])
        acc += tl.dot(a_t, b_t)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))


MM = {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32", "sam": "i32", "sak": "i32", "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
MM_BF16 = {**MM, "a": "*bf16", "b": "*bf16", "c": "*bf16"}
# Unit strides as constants and the rest divisible by 16, as Triton's launcher specialises them for
# contiguous tensors: the loads become vectors, and Hopper's pipeliner uses cp.async.
MM_HINTED = {**MM, "sak": "constexpr", "sbn": "constexpr", "scn": "constexpr"}


def divisible(fn, names):
    """Triton's `tt.divisibility` 16 attribute on the named parameters."""
    return {(fn.arg_names.index(n), ): [["tt.divisibility", 16]] for n in names}


# name: (function, signature, constexprs[, attrs])
KERNELS = {
    "vector_add": (vector_add, {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "softmax": (softmax, {"out": "*fp32", "inp": "*fp32", "in_stride": "i32", "out_stride": "i32", "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "layernorm": (layernorm, {"x": "*fp16", "y": "*fp16", "w": "*fp16", "b": "*fp16", "mean": "*fp32", "rstd": "*fp32", "stride": "i32", "n": "i32", "eps": "fp32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "matmul_f16": (matmul, MM, {"BM": 128, "BN": 128, "BK": 64}),
    "matmul_bf16": (matmul, MM_BF16, {"BM": 128, "BN": 128, "BK": 64}),
    "matmul_f16_hinted": (matmul, MM_HINTED, {"sak": 1, "sbn": 1, "scn": 1, "BM": 128, "BN": 128, "BK": 64}, divisible(matmul, ["a", "b", "c", "M", "N", "K", "sam", "sbk", "scm"])),
    "vector_add_hinted": (vector_add, {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}, divisible(vector_add, ["x", "y", "out", "n"])),
    "attention_fwd": (attention_fwd, {"q": "*fp16", "k": "*fp16", "v": "*fp16", "o": "*fp16", "sqm": "i32", "skn": "i32", "svn": "i32", "som": "i32", "n_ctx": "i32", "scale": "fp32", "BM": "constexpr", "BN": "constexpr", "D": "constexpr"}, {"BM": 128, "BN": 64, "D": 64}),
    # The attention forward as benches/jit/triton_bench.py launches it (contiguous fp16 tensors, head
    # size 64): the launcher specialises the pointers, strides and n_ctx as divisible by 16.
    "attention_fwd_hinted": (attention_fwd, {"q": "*fp16", "k": "*fp16", "v": "*fp16", "o": "*fp16", "sqm": "i32", "skn": "i32", "svn": "i32", "som": "i32", "n_ctx": "i32", "scale": "fp32", "BM": "constexpr", "BN": "constexpr", "D": "constexpr"}, {"BM": 64, "BN": 64, "D": 64}, divisible(attention_fwd, ["q", "k", "v", "o", "sqm", "skn", "svn", "som", "n_ctx"])),
    "histogram": (histogram, {"x": "*i32", "bins": "*i32", "n": "i32", "n_bins": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "matmul_tma": (matmul_tma, {"a_desc": "tensordesc<fp16[128, 64]>", "b_desc": "tensordesc<fp16[64, 128]>", "c_desc": "tensordesc<fp16[128, 128]>", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}, {"BM": 128, "BN": 128, "BK": 64}),
}


def main():
    args = sys.argv[1:]
    arch = 90
    if args[:1] == ["--arch"]:
        arch, args = int(args[1]), args[2:]
    out_dir = args[0]
    names = args[1:] or list(KERNELS)
    os.makedirs(out_dir, exist_ok=True)
    target = GPUTarget("cuda", arch, 32)
    for name in names:
        fn, sig, consts, *attrs = KERNELS[name]
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs[0] if attrs else None), target=target)
        with open(os.path.join(out_dir, name + ".ptx"), "w") as f:
            f.write(k.asm["ptx"])
        with open(os.path.join(out_dir, name + ".cubin"), "wb") as f:
            f.write(k.asm["cubin"])
        meta = {"name": k.metadata.name, "n_regs": getattr(k, "n_regs", None), "hash": k.metadata.hash}
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(meta, f)
        print(f"{name}: {len(k.asm['cubin'])} bytes of cubin")


if __name__ == "__main__":
    main()
