"""gasan's Python start-up hook: framework memory pools hand out individually checked allocations,
and JAX's XLA runs gasan's ptxas front end.

gasan-run (option framework_pools=1, the default) writes this file into a directory of its own and
puts that directory first on PYTHONPATH, so Python's `site` imports it as `sitecustomize` at
start-up. It
- takes its directory off `sys.path` again (the program sees the path it would see without gasan);
- turns CuPy's memory pools off when the program imports CuPy: `cupy.cuda.set_allocator(None)` and
  `cupy.cuda.set_pinned_memory_allocator(None)`, so that every CuPy array is its own cudaMalloc,
  with redzones, instead of a slice of a pooled block. CuPy is not imported here: a finder on
  `sys.meta_path` waits for the program's own `import cupy` and acts when that import has finished
  (at once if CuPy is already imported). An allocator the program sets itself later stays;
- points XLA at gasan's ptxas front end when the program imports JAX and gasan-run made the
  front end's directory (`GASAN_JIT_TOOLS`): JAX writes its CUDA data directory (`jax._src.lib.
  cuda_path`, the pip `nvidia/cuda_nvcc` package when installed) into every compile's options,
  over any `XLA_FLAGS`, and XLA runs that directory's `bin/ptxas` before `PATH`. Once
  `jax._src.lib` is imported, its `cuda_path` becomes `<GASAN_JIT_TOOLS>/xla-cuda-<hash>/`, whose
  `bin/ptxas` is the front end and whose other entries (`nvvm` with libdevice, the other tools)
  are links to the original's; `GASAN_REAL_PTXAS_XLA` names the original `bin/ptxas`, which the
  front end runs as the real one (jit/src/real.rs). Where JAX names no directory with a ptxas, the
  directory is made the same way from the CUDA directory XLA's own search would take its ptxas
  from (`PATH`, `/usr/local/cuda`, `/opt/cuda`, pip's `nvidia/cu13`), so XLA runs the front end
  with the ptxas it would have run; where there is none either, XLA finds the front end on `PATH`,
  as gasan-run set it;
- says, at JAX's import, when `XLA_PYTHON_CLIENT_ALLOCATOR` is not `cuda_async` (the program set it
  before importing JAX, as many scripts do, or the user kept another value): JAX's buffers are then
  not gasan's allocations (its BFC pool's slices, or with `platform` XLA's own VMM mappings) and
  kernels' accesses to them are not checked. JAX reads the variable when it first uses the GPU;
  it is left as the program set it;
- explains, when PyTorch refuses to share a CUDA tensor with another process because its
  allocator is the `cudaMallocAsync` backend (gasan-run's default setting where the user set
  none): PyTorch's own message ("cudaMallocAsync does not yet support shareIpcHandle") does not
  say that gasan chose the backend, nor how to run such a program (`--framework-pools 0`). The
  error stays a RuntimeError, with both messages;
- then runs the `sitecustomize` this one shadows, if there is one (the next on `sys.path`), as if
  gasan were not there.

Nothing here may break the program: a failure to turn a pool off, or to redirect XLA (JAX keeps its
directory then), is one line on stderr.
`GASAN_OPTIONS=verbosity=1` (or more) prints what was done.
"""

import sys


def _gasan_verbosity():
    import os
    import re

    m = re.search(r"(?:^|[:\s])verbosity=['\"]?(\d+)", os.environ.get("GASAN_OPTIONS", ""))
    return int(m.group(1)) if m else 0


def _gasan_say(msg):
    sys.stderr.write("==gasan== python: %s\n" % msg)


def _gasan_cupy_pools_off(cupy):
    try:
        cuda = cupy.cuda
        cuda.set_allocator(None)
        cuda.set_pinned_memory_allocator(None)
    except Exception as e:  # never break the program
        _gasan_say("could not turn CuPy's memory pools off (%s: %s); CuPy arrays are slices of pooled blocks" % (type(e).__name__, e))
        return
    if _gasan_verbosity() >= 1:
        _gasan_say("CuPy memory pools off (device and pinned): every array is its own allocation")


def _gasan_xla_dir(tools, orig, front):
    """`<tools>/xla-cuda-<hash of orig>/`: `bin/ptxas` links to the front end, every other entry
    (and every other tool in `bin/`) to the original's. Made under a temporary name and renamed,
    so a concurrent process sees none or all of it."""
    import hashlib
    import os
    import shutil
    import tempfile

    name = "xla-cuda-" + hashlib.sha256(os.fsencode(orig)).hexdigest()[:16]
    final = os.path.join(tools, name)

    def good(d):
        return os.path.realpath(os.path.join(d, "bin", "ptxas")) == front and all(
            os.path.realpath(os.path.join(d, e)) == os.path.realpath(os.path.join(orig, e)) for e in os.listdir(orig) if e != "bin"
        )

    if os.path.isdir(final) and good(final):
        return final
    # Named `xla-cuda-*` too: the front end knows its role by that name (jit/src/real.rs).
    tmp = tempfile.mkdtemp(prefix=name + ".", dir=tools)
    try:
        for e in os.listdir(orig):
            if e != "bin":
                os.symlink(os.path.join(orig, e), os.path.join(tmp, e))
        os.mkdir(os.path.join(tmp, "bin"))
        for e in os.listdir(os.path.join(orig, "bin")):
            if e != "ptxas":
                os.symlink(os.path.join(orig, "bin", e), os.path.join(tmp, "bin", e))
        os.symlink(front, os.path.join(tmp, "bin", "ptxas"))
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process made it first: use it if it is right.
            if os.path.isdir(final) and good(final):
                shutil.rmtree(tmp, ignore_errors=True)
                return final
            # A stale one (JAX's directory changed): moved aside and replaced; if that fails too,
            # this process uses its own.
            try:
                stale = tempfile.mkdtemp(prefix="." + name + ".stale.", dir=tools)
                os.rename(final, os.path.join(stale, "old"))
                os.rename(tmp, final)
            except OSError:
                return tmp
            shutil.rmtree(stale, ignore_errors=True)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _gasan_cuda_root_as_xla_finds_it(front):
    """The CUDA directory whose `bin/ptxas` XLA runs when JAX names none it can use: XLA looks in
    its data directory, then on `PATH`, then in `/usr/local/cuda`, `/opt/cuda` and the pip CUDA
    next to its plugin (`FindCudaExecutable`, `CandidateCudaRoots`: `PreferPtxasFromPath` is true).
    Only a directory with `nvvm/libdevice` too (what XLA needs of its data directory), and never
    gasan's front end. `None` if there is none."""
    import os

    dirs = []
    for p in os.environ.get("PATH", "").split(os.pathsep):
        if p and os.path.basename(os.path.normpath(p)) == "bin":
            dirs.append(os.path.dirname(os.path.normpath(p)))
    dirs += ["/usr/local/cuda", "/opt/cuda"]
    for p in sys.path:
        if p and os.path.isdir(os.path.join(p, "nvidia")):
            dirs += [os.path.join(p, "nvidia", "cu13"), os.path.join(p, "nvidia", "cuda_nvcc")]
    for d in dirs:
        ptxas = os.path.join(d, "bin", "ptxas")
        if (
            os.path.isfile(ptxas)
            and os.access(ptxas, os.X_OK)
            and os.path.realpath(ptxas) != front
            and os.path.isdir(os.path.join(d, "nvvm", "libdevice"))
        ):
            return d
    return None


def _gasan_xla_front_end(lib):
    import os

    tools = os.environ.get("GASAN_JIT_TOOLS", "")
    if not tools:
        return
    verbose = _gasan_verbosity() >= 1
    orig = getattr(lib, "cuda_path", None)
    try:
        front = os.path.realpath(os.path.join(tools, "ptxas"))
        real = os.path.join(orig, "bin", "ptxas") if orig else None
        if real is not None and os.path.realpath(real) == front:
            return  # gasan's directory already (a gasan-run under another)
        if real is None or not (os.path.isfile(real) and os.access(real, os.X_OK)):
            # JAX names no directory, or one without ptxas (jax 0.11 names the string "None" when
            # `nvidia.cu13` has no bin/ptxas): XLA would run the first ptxas of its own search, whose
            # `--version` probe it caches; gasan's front end on PATH answers it only if it finds a
            # real ptxas itself. Naming that ptxas's directory, behind gasan's, makes XLA run the
            # front end with the ptxas it would have run.
            why = "JAX names no CUDA directory" if not orig else "JAX's CUDA directory %s has no bin/ptxas" % orig
            root = _gasan_cuda_root_as_xla_finds_it(front)
            if root is None:
                if verbose:
                    _gasan_say("%s and XLA's search finds no CUDA directory with bin/ptxas and nvvm/libdevice: XLA runs ptxas from PATH (gasan's front end first)" % why)
                return
            if verbose:
                _gasan_say("%s: XLA's search finds %s" % (why, root))
            orig, real = root, os.path.join(root, "bin", "ptxas")
        d = _gasan_xla_dir(tools, orig, front)
        os.environ["GASAN_REAL_PTXAS_XLA"] = real
        lib.cuda_path = d
    except Exception as e:  # never break the program
        _gasan_say("could not point XLA at gasan's ptxas (%s: %s); JAX/XLA kernels from %s stay unchecked" % (type(e).__name__, e, orig))
        return
    if verbose:
        _gasan_say("XLA's CUDA directory is %s (bin/ptxas: gasan's front end, running %s; the rest: %s)" % (d, real, orig))


def _gasan_jax_allocator():
    import os

    allocator = os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default")
    if allocator.lower() != "cuda_async":
        _gasan_say(
            "XLA_PYTHON_CLIENT_ALLOCATOR=%s: JAX's buffers are not gasan's allocations (its BFC pool's slices, or with platform XLA's own VMM mappings), "
            "so kernels' accesses to them are not checked; cuda_async (gasan-run's setting) makes each buffer a checked allocation" % allocator
        )


def _gasan_jax(lib):
    _gasan_jax_allocator()
    _gasan_xla_front_end(lib)


# What PyTorch's cudaMallocAsync backend raises when a tensor is shared between processes
# (c10/cuda/CUDAMallocAsyncAllocator.cpp: shareIpcHandle, getIpcDevPtr).
_GASAN_ASYNC_NO_IPC = "cudaMallocAsync does not yet support"


def _gasan_torch_sharing(torch):
    """Wraps `torch.UntypedStorage._share_cuda_` (what torch.multiprocessing's reductions call)
    so that the async backend's refusal says what gasan-run set and what to do."""
    storage = getattr(torch, "UntypedStorage", None)
    share = getattr(storage, "_share_cuda_", None)
    if share is None or getattr(share, "_gasan", False):
        return

    def _share_cuda_(self, *args, **kwargs):
        try:
            return share(self, *args, **kwargs)
        except RuntimeError as e:
            if _GASAN_ASYNC_NO_IPC not in str(e):
                raise
            raise RuntimeError(
                "%s\n[gasan] gasan-run set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (framework_pools=1) so that each tensor "
                "is a checked allocation, and with that backend PyTorch cannot share CUDA tensors between processes "
                "(torch.multiprocessing). Run this program with gasan-run --framework-pools 0: tensors are then checked by "
                "the caching allocator's segments, not one by one." % e
            ) from e

    _share_cuda_._gasan = True
    try:
        storage._share_cuda_ = _share_cuda_
    except Exception as e:
        _gasan_say("could not wrap torch.UntypedStorage._share_cuda_ (%s): PyTorch's own message stays" % e)


class _GasanLoader(object):
    """Wraps a module's loader: runs it, then the action; everything else goes to the original."""

    def __init__(self, inner, finder):
        self._inner = inner
        self._finder = finder

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        # The module keeps the real loader; the finder's job is done.
        try:
            module.__loader__ = self._inner
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._inner
        except Exception:
            pass
        self._finder.remove()
        self._finder.action(module)


class _GasanFinder(object):
    """On `sys.meta_path`: finds nothing itself; wraps the loader of module `name` so that
    `action(module)` runs once its import has finished."""

    def __init__(self, name, action):
        self.name = name
        self.action = action

    def find_spec(self, name, path=None, target=None):
        if name != self.name or (path is not None and "." not in name):
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _GasanFinder):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _GasanLoader(spec.loader, self)
        return spec

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def invalidate_caches(self):
        pass


def _gasan_install():
    import os

    here = os.path.dirname(os.path.realpath(__file__))

    def ours(p):
        return p != "" and os.path.realpath(p) == here

    sys.path[:] = [p for p in sys.path if not ours(p)]
    for name, action in (("cupy", _gasan_cupy_pools_off), ("jax._src.lib", _gasan_jax), ("torch", _gasan_torch_sharing)):
        if name in sys.modules:
            action(sys.modules[name])
        else:
            sys.meta_path.insert(0, _GasanFinder(name, action))


_gasan_install()

# The sitecustomize this one shadows (our directory is off sys.path now), as `site` would run it;
# its errors reach `site` as they would without gasan.
_gasan_self = sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401  (the next one on sys.path)
except ImportError as _e:
    if getattr(_e, "name", None) != "sitecustomize":
        raise
    if _gasan_self is not None:
        sys.modules["sitecustomize"] = _gasan_self
