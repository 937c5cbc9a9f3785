#!/usr/bin/env bash
# Builds the examples into examples/out/ with the pinned nvcc (scripts/cuda-toolchain.sh installs it
# under .cache/ on first use; no GPU needed), or with the nvcc named by NVCC:
#   overflow, use_after_free, shared_overflow   one program per examples/*.cu
#   torch_extension_kernel.ptx                  torch_extension.py's KERNEL compiled alone (PyTorch
#                                               compiles the real extension at run time)
#   -arch=sm_75 embeds sm_75 SASS and compute_75 PTX: gasan checks the PTX, and it runs on every GPU
#   CUDA 13 supports (Turing and newer). Set ARCH to change it (e.g. ARCH=sm_90).
#   -lineinfo lets reports name the source line.
# Usage: examples/build.sh     env: NVCC, ARCH (sm_75)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nvcc=${NVCC:-$("$here/../scripts/cuda-toolchain.sh")/bin/nvcc}
arch=${ARCH:-sm_75}
mkdir -p "$here/out"
for src in "$here"/*.cu; do
  name=$(basename "$src" .cu)
  "$nvcc" -O2 -lineinfo -arch="$arch" -o "$here/out/$name" "$src"
  echo "$here/out/$name"
done
# The PyTorch example's kernel, without the PyTorch launcher: it must compile as plain CUDA.
python3 - "$here/torch_extension.py" "$here/out/torch_extension_kernel.cu" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
kernel = next(n.value.value for n in tree.body
              if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "KERNEL" for t in n.targets))
open(sys.argv[2], "w").write(kernel)
PY
"$nvcc" -ptx -lineinfo -arch="$arch" -o "$here/out/torch_extension_kernel.ptx" "$here/out/torch_extension_kernel.cu"
echo "$here/out/torch_extension_kernel.ptx"
