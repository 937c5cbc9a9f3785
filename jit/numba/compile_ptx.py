"""Numba-CUDA's PTX for a kernel with a planted overflow, made on a CPU (no GPU, no driver):
runtime/tests/fixtures/numba_k_numba_write.ptx, which runtime/tests/jit_nvrtc.rs links with
nvJitLink under the preloaded runtime (Numba-CUDA >= 0.16 links through cuda.core's Linker, i.e.
nvJitLink when it loads).

Made 2026-12-05 with numba 0.68.1, numba-cuda 0.30.4 (pip), NVVM and NVRTC 13.0.88:
    pip install --target SITE numba-cuda==0.30.4
    CUDA_HOME=H LD_LIBRARY_PATH=H/lib64 python3 jit/numba/compile_ptx.py SITE OUT.ptx
where H/nvvm/lib64/libnvvm.so and H/nvvm/libdevice come from the pinned toolchain
(scripts/cuda-toolchain.sh) and H/lib64 holds its libcudart.so.13 and the pinned libnvrtc.so.13
(jit/nvrtc/nvrtc.sh): numba-cuda asks NVRTC which architectures it supports.
"""
import site
import sys

site.addsitedir(sys.argv[1])  # runs numba-cuda's .pth, which makes numba.cuda numba-cuda's

from numba import cuda, float32, int64  # noqa: E402


def k_numba_write(p, idx):
    if cuda.threadIdx.x == 0:
        p[idx] = 3.0  # BUG:numba_overflow (idx == len(p) writes one past the array)


ptx, _ = cuda.compile_ptx(k_numba_write, (float32[:], int64), cc=(9, 0), lineinfo=True)
open(sys.argv[2], "w").write(ptx)

# With a third argument, also the kernel's LTO-IR (Numba-CUDA 0.30 links NVVM LTO-IR with nvJitLink
# `-lto`): runtime/tests/fixtures/jit_numba_k_numba_write.ltoir, made 2026-12-05 the same way
# (`... compile_ptx.py SITE OUT.ptx OUT.ltoir`). Lines above the kernel stay as they are: both
# fixtures name its line.
if len(sys.argv) > 3:
    ltoir, _ = cuda.compile(k_numba_write, (float32[:], int64), cc=(9, 0), lineinfo=True, device=False, abi="numba", output="ltoir")
    open(sys.argv[3], "wb").write(bytes(ltoir))
