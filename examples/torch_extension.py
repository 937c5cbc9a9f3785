"""gasan first programs: a PyTorch custom CUDA kernel with an off-by-one bounds test.

The extension is compiled at run time by torch.utils.cpp_extension.load_inline (it needs PyTorch
with CUDA, nvcc and ninja). Its kernel reads x[n] of an n-element tensor. Under gasan-run,
PyTorch's caching allocator is off (framework_pools=1), so the tensor is its own allocation and
the read one past it is reported; natively the program prints a sum (its last term read past the
tensor) and exits 0.

    target/release/gasan-run -- python3 examples/torch_extension.py

Expected report: examples/expected/torch_extension.txt. load_inline embeds PTX for the newest GPU
it compiles for (TORCH_CUDA_ARCH_LIST's last entry gets "+PTX" when the variable is unset), which
is what gasan checks; an extension built for SASS only would get no per-access checks.
examples/build.sh compiles KERNEL on its own with the pinned nvcc, so a syntax error shows up
without PyTorch.
"""

import sys

# Plain CUDA C++, no PyTorch headers: examples/build.sh compiles it alone.
KERNEL = r"""
__global__ void shift_sum(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n - 1) y[i] = x[i] + x[i + 1];  // BUG: i == n - 1 reads x[n], one past the tensor
}
"""

LAUNCHER = r"""
#include <torch/extension.h>
torch::Tensor shift_sum_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.is_contiguous(), "x: contiguous float32 CUDA tensor");
    auto y = torch::empty_like(x);
    long n = x.numel();
    shift_sum<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

CPP = "torch::Tensor shift_sum_cuda(torch::Tensor x);"


def main():
    try:
        import torch
        from torch.utils.cpp_extension import load_inline
    except ImportError as e:
        print("SKIPPED: PyTorch is not installed (%s)" % e)
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: torch.cuda is not available")
        return 77
    ext = load_inline(
        name="gasan_example_shift_sum",
        cpp_sources=[CPP],
        cuda_sources=[KERNEL + LAUNCHER],
        functions=["shift_sum_cuda"],
        extra_cuda_cflags=["-lineinfo"],  # reports name the kernel's source line
    )
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = ext.shift_sum_cuda(x)
    torch.cuda.synchronize()
    print("sum %.1f" % float(y.sum()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
