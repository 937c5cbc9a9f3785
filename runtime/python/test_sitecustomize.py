"""gasan's Python start-up hook (sitecustomize.py here) and JAX: a real `python3` child with the
hook first on PYTHONPATH, as gasan-run puts it, imports a stand-in `jax._src.lib` whose
`cuda_path` is a CUDA directory with `bin/ptxas` and `nvvm/libdevice`. After the import, JAX's
`cuda_path` is gasan's directory under GASAN_JIT_TOOLS: its `bin/ptxas` is the front end, its
`nvvm` and other tools are the original's, and GASAN_REAL_PTXAS_XLA names the original ptxas.
Where JAX names no directory with a ptxas, the one XLA's own search finds (on PATH here) is used
the same way. Whatever fails, JAX keeps its directory and the program runs on.

Run: cd runtime/python && python3 -m unittest -v test_sitecustomize
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sitecustomize.py")

# What the child reports: JAX's directory before the hook acted is not observable, so the stand-in
# keeps a copy of the original in `ORIGINAL`.
PROGRAM = r"""
import json, os, sys
import jax._src.lib as lib
print(json.dumps({
    "cuda_path": lib.cuda_path,
    "original": lib.ORIGINAL,
    "real": os.environ.get("GASAN_REAL_PTXAS_XLA"),
    "hook_on_path": any(p.endswith("hook") for p in sys.path),
}))
"""


def executable(path, text="#!/bin/sh\nexit 0\n"):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class XlaDataDirectory(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="gasan-hook-test-")
        self.addCleanup(shutil.rmtree, self.d, True)
        hook = os.path.join(self.d, "hook")
        os.mkdir(hook)
        shutil.copy(HOOK, os.path.join(hook, "sitecustomize.py"))
        # The CUDA directory JAX finds (its pip nvidia/cuda_nvcc).
        self.cuda = os.path.join(self.d, "site-packages", "nvidia", "cuda_nvcc")
        os.makedirs(os.path.join(self.cuda, "bin"))
        os.makedirs(os.path.join(self.cuda, "nvvm", "libdevice"))
        executable(os.path.join(self.cuda, "bin", "ptxas"))
        executable(os.path.join(self.cuda, "bin", "nvlink"))
        with open(os.path.join(self.cuda, "nvvm", "libdevice", "libdevice.10.bc"), "wb") as f:
            f.write(b"BC\xc0\xde")
        # gasan-run's tool directory: `ptxas` links to the front end.
        self.tools = os.path.join(self.d, "jit-tools")
        os.mkdir(self.tools)
        self.front = os.path.join(self.d, "gasan-ptxas")
        executable(self.front)
        os.symlink(self.front, os.path.join(self.tools, "ptxas"))
        self.jax("%r" % self.cuda)

    def jax(self, cuda_path_expr):
        """The stand-in `jax._src.lib` with `cuda_path = <cuda_path_expr>`."""
        lib = os.path.join(self.d, "fake", "jax", "_src", "lib")
        shutil.rmtree(os.path.join(self.d, "fake"), True)
        os.makedirs(lib)
        for pkg in ("jax", os.path.join("jax", "_src")):
            open(os.path.join(self.d, "fake", pkg, "__init__.py"), "w").close()
        with open(os.path.join(lib, "__init__.py"), "w") as f:
            f.write("cuda_path = %s\nORIGINAL = cuda_path\n" % cuda_path_expr)

    def cuda_dir(self, root):
        """A CUDA directory at `root` with `bin/ptxas` and `nvvm/libdevice`."""
        os.makedirs(os.path.join(root, "bin"))
        os.makedirs(os.path.join(root, "nvvm", "libdevice"))
        executable(os.path.join(root, "bin", "ptxas"))
        return root

    def system_cuda(self):
        """The fixed places XLA's search looks in after PATH, if this machine has one."""
        for d in ("/usr/local/cuda", "/opt/cuda"):
            if os.access(os.path.join(d, "bin", "ptxas"), os.X_OK) and os.path.isdir(os.path.join(d, "nvvm", "libdevice")):
                return d
        return None

    def run_child(self, options="", tools=True, path=None, allocator="cuda_async", prelude=""):
        env = {k: v for k, v in os.environ.items() if k not in ("GASAN_JIT_TOOLS", "GASAN_REAL_PTXAS_XLA", "PYTHONPATH", "XLA_PYTHON_CLIENT_ALLOCATOR")}
        # JAX's allocator as gasan-run sets it (None: unset).
        if allocator is not None:
            env["XLA_PYTHON_CLIENT_ALLOCATOR"] = allocator
        # gasan-run's tool directory first, as gasan-run sets PATH; then what the test names.
        env["PATH"] = os.pathsep.join([self.tools] + (path or []))
        env["PYTHONPATH"] = os.path.join(self.d, "hook") + ":" + os.path.join(self.d, "fake")
        env["GASAN_OPTIONS"] = options
        if tools:
            env["GASAN_JIT_TOOLS"] = self.tools
        p = subprocess.run([sys.executable, "-c", prelude + PROGRAM], env=env, cwd=self.d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout), p.stderr

    def test_cuda_path_becomes_gasans_directory(self):
        got, err = self.run_child()
        self.assertEqual(err, "")
        d = got["cuda_path"]
        self.assertEqual(os.path.dirname(d), self.tools)
        self.assertTrue(os.path.basename(d).startswith("xla-cuda-"), d)
        self.assertEqual(os.path.realpath(os.path.join(d, "bin", "ptxas")), os.path.realpath(self.front))
        self.assertEqual(os.path.realpath(os.path.join(d, "bin", "nvlink")), os.path.realpath(os.path.join(self.cuda, "bin", "nvlink")))
        self.assertEqual(os.path.realpath(os.path.join(d, "nvvm")), os.path.realpath(os.path.join(self.cuda, "nvvm")))
        self.assertTrue(os.path.isfile(os.path.join(d, "nvvm", "libdevice", "libdevice.10.bc")))
        self.assertEqual(got["real"], os.path.join(self.cuda, "bin", "ptxas"))
        self.assertEqual(got["original"], self.cuda)
        self.assertFalse(got["hook_on_path"])
        # A second program reuses the directory; nothing half-made is left beside it.
        again, _ = self.run_child()
        self.assertEqual(again["cuda_path"], d)
        self.assertEqual(sorted(os.listdir(self.tools)), sorted(["ptxas", os.path.basename(d)]))

    def test_a_stale_directory_is_replaced(self):
        import hashlib

        stale = os.path.join(self.tools, "xla-cuda-" + hashlib.sha256(os.fsencode(self.cuda)).hexdigest()[:16])
        os.makedirs(os.path.join(stale, "bin"))
        executable(os.path.join(stale, "bin", "ptxas"))  # not the front end
        got, err = self.run_child()
        self.assertEqual((got["cuda_path"], err), (stale, ""))
        self.assertEqual(os.path.realpath(os.path.join(stale, "bin", "ptxas")), os.path.realpath(self.front))
        self.assertTrue(os.path.isdir(os.path.join(stale, "nvvm", "libdevice")))
        self.assertEqual(sorted(os.listdir(self.tools)), sorted(["ptxas", os.path.basename(stale)]))

    def test_verbosity_1_says_where_xla_runs_ptxas(self):
        _, err = self.run_child("verbosity=1")
        self.assertIn("==gasan== python: XLA's CUDA directory is %s/xla-cuda-" % self.tools, err)
        self.assertIn("running %s" % os.path.join(self.cuda, "bin", "ptxas"), err)

    def test_an_allocator_other_than_cuda_async_is_said_at_jax_s_import(self):
        # Kept from the environment, unset (JAX's BFC pool), or set by the program before it
        # imports JAX: one line, whatever the verbosity; JAX still gets gasan's ptxas.
        for how, kwargs in (
            ("platform", {"allocator": "platform"}),
            ("default", {"allocator": None}),
            ("platform", {"prelude": "import os\nos.environ['XLA_PYTHON_CLIENT_ALLOCATOR'] = 'platform'\n"}),
        ):
            got, err = self.run_child(**kwargs)
            lines = err.splitlines()
            self.assertEqual(len(lines), 1, err)
            self.assertTrue(lines[0].startswith("==gasan== python: XLA_PYTHON_CLIENT_ALLOCATOR=%s: JAX's buffers are not gasan's allocations" % how), err)
            self.assertIn("not checked", lines[0])
            self.assertEqual(os.path.dirname(got["cuda_path"]), self.tools)

    def test_without_gasan_run_s_tool_directory_jax_is_left_alone(self):
        got, err = self.run_child(tools=False)
        self.assertEqual((got["cuda_path"], got["real"], err), (self.cuda, None, ""))

    def test_jax_without_a_cuda_directory_keeps_none(self):
        self.jax("None")
        if self.system_cuda():
            self.skipTest("this machine has a CUDA directory XLA's search finds")
        got, err = self.run_child("verbosity=1")
        self.assertIsNone(got["cuda_path"])
        self.assertIsNone(got["real"])
        self.assertIn("JAX names no CUDA directory and XLA's search finds no CUDA directory", err)
        self.assertIn("XLA runs ptxas from PATH (gasan's front end first)", err)

    def test_a_cuda_directory_without_ptxas_is_kept(self):
        os.remove(os.path.join(self.cuda, "bin", "ptxas"))
        if self.system_cuda():
            self.skipTest("this machine has a CUDA directory XLA's search finds")
        got, err = self.run_child("verbosity=1")
        self.assertEqual(got["cuda_path"], self.cuda)
        self.assertIn("has no bin/ptxas", err)

    def test_without_a_usable_jax_directory_the_one_xla_finds_on_path_is_used(self):
        # JAX names nothing, or (jax 0.11, `nvidia.cu13` without bin/ptxas) the string "None": the
        # CUDA directory of the first ptxas on PATH after gasan's, as XLA would search, with a
        # directory on PATH before it that has no libdevice (XLA could not use it as its data
        # directory) passed over.
        no_libdevice = os.path.join(self.d, "partial")
        os.makedirs(os.path.join(no_libdevice, "bin"))
        executable(os.path.join(no_libdevice, "bin", "ptxas"))
        cuda = self.cuda_dir(os.path.join(self.d, "usr-cuda"))
        for expr in ("None", "'None'"):
            self.jax(expr)
            got, err = self.run_child("verbosity=1", path=[os.path.join(no_libdevice, "bin"), os.path.join(cuda, "bin")])
            d = got["cuda_path"]
            self.assertEqual(os.path.dirname(d), self.tools, expr)
            self.assertEqual(os.path.realpath(os.path.join(d, "bin", "ptxas")), os.path.realpath(self.front), expr)
            self.assertEqual(os.path.realpath(os.path.join(d, "nvvm")), os.path.realpath(os.path.join(cuda, "nvvm")), expr)
            self.assertEqual(got["real"], os.path.join(cuda, "bin", "ptxas"), expr)
            self.assertIn("XLA's search finds %s" % cuda, err)
            self.assertIn("running %s" % os.path.join(cuda, "bin", "ptxas"), err)
        # A JAX directory without ptxas is passed over the same way.
        os.remove(os.path.join(self.cuda, "bin", "ptxas"))
        self.jax("%r" % self.cuda)
        got, err = self.run_child("verbosity=1", path=[os.path.join(cuda, "bin")])
        self.assertEqual(got["real"], os.path.join(cuda, "bin", "ptxas"))
        self.assertIn("JAX's CUDA directory %s has no bin/ptxas: XLA's search finds %s" % (self.cuda, cuda), err)

    def test_gasans_front_end_on_path_is_never_taken_for_the_real_ptxas(self):
        # A `bin` directory whose ptxas is gasan's front end (and which has libdevice) is skipped.
        fake = os.path.join(self.d, "gasan-as-cuda")
        os.makedirs(os.path.join(fake, "nvvm", "libdevice"))
        os.makedirs(os.path.join(fake, "bin"))
        os.symlink(self.front, os.path.join(fake, "bin", "ptxas"))
        self.jax("None")
        if self.system_cuda():
            self.skipTest("this machine has a CUDA directory XLA's search finds")
        got, _ = self.run_child(path=[os.path.join(fake, "bin")])
        self.assertIsNone(got["cuda_path"])
        self.assertIsNone(got["real"])

    def test_a_failure_is_one_warning_line_and_jax_keeps_its_directory(self):
        # GASAN_JIT_TOOLS names a file, not a directory: nothing can be made in it.
        shutil.rmtree(self.tools)
        executable(self.tools)
        got, err = self.run_child()
        self.assertEqual(got["cuda_path"], self.cuda)
        self.assertIsNone(got["real"])
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn("could not point XLA at gasan's ptxas", lines[0])
        self.assertIn("stay unchecked", lines[0])

    def test_gasans_directory_already_is_left(self):
        # A gasan-run under another: JAX's directory is gasan's already.
        first, _ = self.run_child()
        self.jax("%r" % first["cuda_path"])
        got, err = self.run_child()
        self.assertEqual((got["cuda_path"], got["real"], err), (first["cuda_path"], None, ""))


# A stand-in `torch` whose storage refuses to share as PyTorch's cudaMallocAsync backend does
# (REFUSE) or shares (a handle tuple); the child prints what `_share_cuda_` raised or returned.
TORCH = r"""
class UntypedStorage(object):
    REFUSE = %r
    def _share_cuda_(self):
        if self.REFUSE:
            raise RuntimeError("cudaMallocAsync does not yet support shareIpcHandle. If you need it, please file an issue describing your use case.")
        return (0, b"handle", 64)
"""

SHARE = r"""
import json, torch
try:
    out = {"returned": list(map(str, torch.UntypedStorage()._share_cuda_()))}
except RuntimeError as e:
    out = {"raised": str(e), "cause": str(e.__cause__)}
print(json.dumps(out))
"""


class TorchSharing(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="gasan-hook-test-")
        self.addCleanup(shutil.rmtree, self.d, True)
        os.mkdir(os.path.join(self.d, "hook"))
        shutil.copy(HOOK, os.path.join(self.d, "hook", "sitecustomize.py"))

    def run_child(self, refuse, hook=True):
        torch = os.path.join(self.d, "fake", "torch")
        shutil.rmtree(os.path.join(self.d, "fake"), True)
        os.makedirs(torch)
        with open(os.path.join(torch, "__init__.py"), "w") as f:
            f.write(TORCH % refuse)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GASAN_OPTIONS")}
        env["PYTHONPATH"] = ((os.path.join(self.d, "hook") + ":") if hook else "") + os.path.join(self.d, "fake")
        p = subprocess.run([sys.executable, "-c", SHARE], env=env, cwd=self.d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_the_async_backends_refusal_says_what_gasan_set_and_what_to_run(self):
        got = self.run_child(refuse=True)
        self.assertIn("does not yet support shareIpcHandle", got["raised"])
        self.assertIn("--framework-pools 0", got["raised"])
        self.assertIn("backend:cudaMallocAsync", got["raised"])
        self.assertIn("does not yet support shareIpcHandle", got["cause"], "PyTorch's error is kept as the cause")

    def test_without_the_hook_pytorchs_message_is_alone(self):
        got = self.run_child(refuse=True, hook=False)
        self.assertNotIn("gasan", got["raised"])

    def test_a_storage_that_shares_is_left_as_it_is(self):
        self.assertEqual(self.run_child(refuse=False), {"returned": ["0", "b'handle'", "64"]})


if __name__ == "__main__":
    unittest.main()
