"""pair.py with stand-in torch, triton and kernels modules (no GPU): the native copy is compiled
with the real ptxas in a Triton cache directory of its own (Triton keys its disk cache on the
ptxas version once per process, so a shared cache would hand it the checked cubin), the process's
own settings come back afterwards, both copies launch on the same tensors, and a cubin that is not
what it should be, or a checked copy that does not write what the native one writes, makes the
exit status 1.

Run: cd benches/jit && python3 -m unittest -v test_pair
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

TORCH = r'''
import json, os, time
class _Event:
    def __init__(self, enable_timing=True): self.t = 0.0
    def record(self): self.t = time.perf_counter()
    def synchronize(self): pass
    def elapsed_time(self, o): return (o.t - self.t) * 1000.0
class cuda:
    Event = _Event
    @staticmethod
    def is_available(): return True
    @staticmethod
    def _sleep(cycles):
        with open(os.environ["PAIR_TEST_LOG"], "a") as f:
            f.write(json.dumps(["sleep", cycles]) + "\n")
    @staticmethod
    def synchronize(): pass
float16 = None
int32 = "int32"
class _Tensor:
    """One value stands for the whole tensor."""
    def __init__(self, floating=True, v=0.0): self.floating, self.v = floating, v
    def stride(self, i): return 1
    def is_floating_point(self): return self.floating
    def fill_(self, v): self.v = v
    def clone(self): return _Tensor(self.floating, self.v)
    def float(self): return self
def _t(*a, **k): return _Tensor(k.get("dtype") != int32)
randn = empty_like = empty = randint = zeros = _t
def allclose(a, b, rtol, atol): return abs(a.v - b.v) <= atol + rtol * abs(b.v)  # NaN: False
'''

TRITON = r'''
def cdiv(a, b): return (a + b - 1) // b
def jit(f): return f
'''

# Each launch logs (module, kernel, ptxas, cache dir, tensor ids), writes 1 into every tensor it
# is given (the checked copy, module `kernels`, writes nothing with SKIP_WORK=1) and returns a
# kernel whose cubin holds gasan's control block when the ptxas that "compiled" it was gasan's
# (MARK_BOTH: always).
KERNELS = r'''
import json, os
LOG = os.environ["PAIR_TEST_LOG"]
class _Compiled:
    def __init__(self, checked): self.asm = {"cubin": b"..__gasan_ctl.." if checked else b"plain"}
class _Kernel:
    def __init__(self, name): self.name = name
    def __getitem__(self, grid):
        def launch(*args, **kw):
            ptxas = os.environ.get("TRITON_PTXAS_PATH", "")
            with open(LOG, "a") as f:
                f.write(json.dumps([__name__, self.name, ptxas, os.environ.get("TRITON_CACHE_DIR"), [id(a) for a in args[:2]]]) + "\n")
            if not (__name__ == "kernels" and os.environ.get("SKIP_WORK") == "1"):
                for a in args:
                    if hasattr(a, "fill_"):
                        a.fill_(1.0)
            return _Compiled("gasan" in ptxas or os.environ.get("MARK_BOTH") == "1")
        return launch
vector_add, softmax, layernorm, matmul, attention_fwd, histogram = (_Kernel(n) for n in ("vector_add", "softmax", "layernorm", "matmul", "attention_fwd", "histogram"))
'''


class Pair(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="gasan-pair-test-")
        self.addCleanup(shutil.rmtree, self.d, True)
        os.makedirs(os.path.join(self.d, "benches", "jit"))
        os.makedirs(os.path.join(self.d, "jit", "triton"))
        os.makedirs(os.path.join(self.d, "site", "triton"))
        for name in ("pair.py", "triton_bench.py"):
            shutil.copy(os.path.join(HERE, name), os.path.join(self.d, "benches", "jit", name))
        with open(os.path.join(self.d, "jit", "triton", "kernels.py"), "w") as f:
            f.write(KERNELS)
        with open(os.path.join(self.d, "site", "torch.py"), "w") as f:
            f.write(TORCH)
        with open(os.path.join(self.d, "site", "triton", "__init__.py"), "w") as f:
            f.write(TRITON)
        self.log = os.path.join(self.d, "log")

    def run_pair(self, *args, **env_extra):
        if os.path.exists(self.log):
            os.remove(self.log)
        env = {k: v for k, v in os.environ.items() if k not in ("GASAN_REAL_PTXAS", "TRITON_CACHE_DIR", "MARK_BOTH", "SKIP_WORK")}
        env.update(PYTHONPATH=os.path.join(self.d, "site"), PAIR_TEST_LOG=self.log, TRITON_PTXAS_PATH="/tools/gasan/ptxas", **env_extra)
        p = subprocess.run([sys.executable, os.path.join(self.d, "benches", "jit", "pair.py"), "--reps", "4", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        import json
        with open(self.log) as f:
            launches = [json.loads(line) for line in f]
        return p, launches

    def test_the_native_copy_compiles_with_the_real_ptxas_in_a_cache_of_its_own(self):
        p, launches = self.run_pair(GASAN_REAL_PTXAS="/real/ptxas")
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = [line for line in p.stdout.splitlines() if line.startswith("PAIR ")]
        self.assertEqual(len(rows), 6, p.stdout)
        self.assertTrue(all(r.endswith("checked_cubin yes outputs same") for r in rows), p.stdout)
        for kernel in ("vector_add", "histogram"):
            first = {}
            for module, name, ptxas, cache, tensors in launches:
                if name == kernel:
                    first.setdefault(module, (ptxas, cache, tensors))
            self.assertEqual(first["kernels"][0], "/tools/gasan/ptxas")
            self.assertIsNone(first["kernels"][1], "the checked copy keeps the process's cache")
            self.assertEqual(first["kernels_native"][0], "/real/ptxas")
            self.assertIsNotNone(first["kernels_native"][1], "the native copy compiles in a cache of its own")
            self.assertEqual(first["kernels"][2], first["kernels_native"][2], "both copies launch on the same tensors")
        # After its first launch each native kernel runs with the process's settings again.
        for kernel in ("vector_add", "softmax", "histogram"):
            later = [(ptxas, cache) for module, name, ptxas, cache, _ in launches if module == "kernels_native" and name == kernel][1:]
            self.assertTrue(later and all(x == ("/tools/gasan/ptxas", None) for x in later), later)
        self.assertIn("PAIRS geomean", p.stdout)

    def test_queued_launches_wait_behind_a_gpu_busy_wait_and_others_do_not(self):
        p, launches = self.run_pair("--queued", GASAN_REAL_PTXAS="/real/ptxas")
        self.assertEqual(p.returncode, 0, p.stderr)
        sleeps = [k for k, x in enumerate(launches) if x[0] == "sleep"]
        # Each timed launch (4 reps, both copies, 6 kernels) and nothing else follows a busy-wait.
        self.assertEqual(len(sleeps), 4 * 2 * 6, launches)
        self.assertTrue(all(k + 1 < len(launches) and launches[k + 1][0] != "sleep" for k in sleeps), launches)
        p, launches = self.run_pair(GASAN_REAL_PTXAS="/real/ptxas")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse([x for x in launches if x[0] == "sleep"], "no busy-wait without --queued")

    def test_a_native_copy_holding_gasans_checks_fails_the_run(self):
        p, _ = self.run_pair(GASAN_REAL_PTXAS="/real/ptxas", MARK_BOTH="1")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("checked_cubin no", p.stdout)

    def test_a_checked_copy_that_skips_its_work_fails_the_run(self):
        p, _ = self.run_pair(GASAN_REAL_PTXAS="/real/ptxas", SKIP_WORK="1")
        self.assertEqual(p.returncode, 1, p.stdout)
        rows = [line for line in p.stdout.splitlines() if line.startswith("PAIR ")]
        self.assertEqual(len(rows), 6, p.stdout)
        self.assertTrue(all(r.endswith("checked_cubin yes outputs differ") for r in rows), p.stdout)


if __name__ == "__main__":
    unittest.main()
