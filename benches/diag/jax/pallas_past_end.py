# A Pallas read SHIFT elements past a window, printing buffer addresses (diagnosis of a missed report).
import sys
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
shift = int(sys.argv[1]); n, block = 1024, 256
def kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * block, block)] = x_ref[pl.ds(i * block + shift, block)] * 2.0
x = jnp.arange(n, dtype=jnp.float32)
call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // block,))
c = jax.jit(call).lower(x).compile()
r = c(x).block_until_ready()
print("shift", shift, "x at 0x%x" % x.unsafe_buffer_pointer(), "r at 0x%x" % r.unsafe_buffer_pointer(), "sum %.1f" % float(r.sum()), flush=True)
