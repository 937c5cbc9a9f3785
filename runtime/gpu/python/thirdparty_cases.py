"""Kernels nobody on the team wrote, under gasan (issue 39): Triton kernels that ship inside PyTorch
and kernels that Inductor and XLA generate. Each bug is a misuse a user can make of the library
(indices nobody validated), with its clean twin; the clean cases run large third-party kernels
(flex attention forward and backward, Inductor's scatter atomics, XLA's GEMM fusions) where a false
report would show. Run by run_groups.py like jit_cases.py; expectations in expectations.json.

    python3 thirdparty_cases.py CASE

Prints "result ok" when the program ran through; exits 77 with "SKIPPED: ..." when the library or
its entry point is missing. Under gasan a reported case ends with exit status 1 first.
"""

import sys

from jit_cases import jax_gpu, run_case, skip, torch_cuda


def bsr_dense_mm(over):
    """PyTorch's own Triton kernel for a block-sparse (BSR) times dense product, handed a BSR matrix
    whose column indices nobody checked (`torch.sparse_bsr_tensor` does not check them unless
    asked): with `over`, one block's column index is one past the last column block, and the
    kernel reads the dense operand's rows past its end."""
    torch = torch_cuda()
    try:
        from torch.sparse._triton_ops import bsr_dense_mm as mm
    except ImportError as e:
        skip("torch.sparse._triton_ops.bsr_dense_mm not in this PyTorch (%s)" % e)
    bs, mb, kb, n = 32, 4, 4, 64
    crow = torch.arange(0, mb + 1, dtype=torch.int64, device="cuda") * 2
    col = torch.tensor([0, 1, 1, 2, 2, 3, 0, 3], dtype=torch.int64, device="cuda")
    if over:
        col[5] = kb  # one block past the dense operand's rows
    values = torch.randn(2 * mb, bs, bs, dtype=torch.float16, device="cuda")
    bsr = torch.sparse_bsr_tensor(crow, col, values, size=(mb * bs, kb * bs))
    dense = torch.randn(kb * bs, n, dtype=torch.float16, device="cuda")
    out = mm(bsr, dense)
    torch.cuda.synchronize()
    if not over:
        want = bsr.to_dense().float() @ dense.float()
        err = (out.float() - want).abs().max().item()
        print("max error %.4f" % err)
        if err > 0.5:
            sys.exit(3)
    print("checksum %.3f" % float(out.double().sum()))


def embedding_unchecked(over):
    """An embedding lookup compiled by Inductor with its indirect-index assertion turned off (a
    setting users take for speed): with `over`, one index equals the table's row count, and
    Inductor's generated kernel reads the row past the table."""
    torch = torch_cuda()
    import torch._inductor.config as inductor_config
    inductor_config.assert_indirect_indexing = False
    rows, dim = 1000, 64
    table = torch.randn(rows, dim, device="cuda")
    idx = torch.randint(0, rows, (4096,), device="cuda")
    if over:
        idx[100] = rows

    @torch.compile(fullgraph=True)
    def lookup(table, idx):
        return torch.nn.functional.embedding(idx, table) * 2.0

    out = lookup(table, idx)
    torch.cuda.synchronize()
    if not over and not torch.equal(out, table[idx] * 2.0):
        sys.exit(3)
    print("checksum %.3f" % float(out.double().sum()))


def flex_attention_clean():
    """flex_attention (Inductor's attention template) forward and backward with a causal block mask."""
    torch = torch_cuda()
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        skip("flex_attention not in this PyTorch (%s)" % e)
    torch.manual_seed(0)
    b, h, s, d = 2, 4, 512, 64

    def causal(b, h, q, kv):
        return q >= kv

    mask = create_block_mask(causal, B=None, H=None, Q_LEN=s, KV_LEN=s)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    attend = torch.compile(flex_attention)
    out = attend(q, k, v, block_mask=mask)
    out.float().square().mean().backward()
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    err = (out.float() - ref).abs().max().item()
    print("max error %.4f" % err)
    if err > 0.05 or not all(torch.isfinite(t.grad).all() for t in (q, k, v)):
        sys.exit(3)


def scatter_add_clean():
    """Inductor's generated atomics: a compiled embedding backward (index_add into the table's
    gradient) and a segment sum by scatter_add, checked against eager."""
    torch = torch_cuda()
    torch.manual_seed(0)
    table = torch.randn(5000, 96, device="cuda", requires_grad=True)
    idx = torch.randint(0, 5000, (20000,), device="cuda")
    seg = torch.randint(0, 300, (20000,), device="cuda")

    def f(table, idx, seg):
        e = torch.nn.functional.embedding(idx, table)
        sums = torch.zeros(300, 96, device="cuda").scatter_add(0, seg[:, None].expand(-1, 96), e)
        return (sums.tanh() ** 2).sum()

    compiled = torch.compile(f)
    loss = compiled(table, idx, seg)
    loss.backward()
    got = table.grad.clone()
    table.grad = None
    f(table, idx, seg).backward()
    torch.cuda.synchronize()
    err = (got - table.grad).abs().max().item()
    print("max error %.6f" % err)
    if err > 1e-3:
        sys.exit(3)


def jax_gemm_clean():
    """XLA's GEMM fusions (Triton on Hopper) with a fused epilogue, bf16, against float32."""
    jax = jax_gpu()
    jnp = jax.numpy

    @jax.jit
    def f(a, b, bias):
        return jax.nn.relu(a @ b + bias).astype(jnp.float32).sum(axis=1)

    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(ka, (1024, 768), jnp.bfloat16)
    b = jax.random.normal(kb, (768, 1536), jnp.bfloat16)
    bias = jnp.linspace(-1, 1, 1536, dtype=jnp.bfloat16)
    got = f(a, b, bias).block_until_ready()
    want = jax.nn.relu(a.astype(jnp.float32) @ b.astype(jnp.float32) + bias.astype(jnp.float32)).sum(axis=1)
    rel = float(jnp.abs(got - want).max() / (jnp.abs(want).max() + 1e-6))
    print("relative error %.4f" % rel)
    if rel > 0.05:
        sys.exit(3)


CASES = {
    "torch_bsr_bad_col": lambda: bsr_dense_mm(True),
    "torch_bsr_bad_col_clean": lambda: bsr_dense_mm(False),
    "torch_embedding_unchecked": lambda: embedding_unchecked(True),
    "torch_embedding_unchecked_clean": lambda: embedding_unchecked(False),
    "torch_flex_attention_clean": flex_attention_clean,
    "torch_scatter_add_clean": scatter_add_clean,
    "jax_gemm_clean": jax_gemm_clean,
}

if __name__ == "__main__":
    run_case(CASES, sys.argv)
