"""gasan's Python start-up hook: framework memory pools hand out individually checked allocations.

gasan-run (option framework_pools=1, the default) writes this file into a directory of its own and
puts that directory first on PYTHONPATH, so Python's `site` imports it as `sitecustomize` at
start-up. It
- takes its directory off `sys.path` again (the program sees the path it would see without gasan);
- turns CuPy's memory pools off when the program imports CuPy: `cupy.cuda.set_allocator(None)` and
  `cupy.cuda.set_pinned_memory_allocator(None)`, so that every CuPy array is its own cudaMalloc,
  with redzones, instead of a slice of a pooled block. CuPy is not imported here: a finder on
  `sys.meta_path` waits for the program's own `import cupy` and acts when that import has finished
  (at once if CuPy is already imported). An allocator the program sets itself later stays;
- then runs the `sitecustomize` this one shadows, if there is one (the next on `sys.path`), as if
  gasan were not there.

Nothing here may break the program: a failure to turn a pool off is one line on stderr.
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


class _GasanLoader(object):
    """Wraps CuPy's loader: runs it, then turns the pools off; everything else goes to the original."""

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
        _gasan_cupy_pools_off(module)


class _GasanCupyFinder(object):
    """On `sys.meta_path`: finds nothing itself; wraps the loader of the top-level `cupy` package."""

    def find_spec(self, name, path=None, target=None):
        if name != "cupy" or path is not None:
            return None
        for finder in sys.meta_path:
            if finder is self:
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
    if "cupy" in sys.modules:
        _gasan_cupy_pools_off(sys.modules["cupy"])
    else:
        sys.meta_path.insert(0, _GasanCupyFinder())


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
