#!/usr/bin/env bash
# (GPU machine, repository root; gasan binaries in build/bin.) Used for runtime/results.md, H100 2026-12-05.
# What each does: front_end.sh runs the JAX Pallas case with XLA's compiler logs; buffers.sh reads 1, 64 and 1024 elements past a 4096-byte input, dumps XLA's PTX and runs compute-sanitizer; allocator.sh lists the plugin's driver imports and logs XLA's allocations.
# Diagnosis of the JAX case under gasan: where XLA gets ptxas, what gasan sees.
B=$(realpath build/bin); R=${OUT:-/tmp/r}; mkdir -p $R
python3 -c "import jax, jaxlib; from jax._src.lib import cuda_path; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'cuda_path', cuda_path)" 2>&1 | tail -2
export TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=nvptx_compiler=3,subprocess_compilation=3,ptx_compiler_helpers=3,gpu_compiler=1
timeout ${1:-90} $B/gasan-run --verbosity 2 --cache-dir /tmp/jd-cache -- python3 runtime/gpu/python/jit_cases.py jax_pallas_read > $R/jaxdiag.txt 2>&1; echo "rc $?"
grep -iE "ptxas|xla-cuda|cuda_data_dir|cuda_path|checked|unchecked|heap-buffer|module|sitecustom|hook|nvptx|libdevice" $R/jaxdiag.txt | cut -c1-300 | head -70
find /tmp/jd-cache -maxdepth 3 | head -20
