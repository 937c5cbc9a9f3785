"""Unit tests of run_groups.py (no GPU): expectations resolve to real markers, reports are judged
by kind, access, kernel, file:line and device, pending cases give XFAIL/XPASS, and a whole run with
stand-in programs prints the table and fails only on FAIL rows.

    python3 -m unittest -v test_run_groups    (from runtime/gpu/python)
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, stat.S_IRWXU)
import run_groups as rg  # noqa: E402

CASE = {"name": "triton_mask_load", "expect": "report", "kind": "heap-buffer-overflow", "access": "read",
        "kernel": "load_mask_le", "source": "triton_bugs.py", "line": 33}


def report(**kw):
    r = {"tool": "gasan", "kind": "heap-buffer-overflow", "access": "read", "kernel": "load_mask_le",
         "file": "/x/runtime/gpu/python/triton_bugs.py", "line": 33, "device": 0}
    r.update(kw)
    return "noise\n" + json.dumps(r) + "\n"


class Expectations(unittest.TestCase):
    def test_every_case_resolves(self):
        rows = rg.load_cases("all", "/nonexistent", "python3")
        names = [r["name"] for r in rows]
        self.assertEqual(len(names), len(set(names)), "duplicate case names")
        self.assertEqual({r["group"] for r in rows}, {"jit", "mgpu"})
        for r in rows:
            self.assertIn(r["expect"], ("report", "clean"), r["name"])
            if r["expect"] == "report":
                if r.get("check_line", True):
                    self.assertIsNotNone(r["line"], "%s: no BUG:%s marker in %s" % (r["name"], r["name"], r["source"]))
                if r.get("twin"):
                    self.assertIn(r["twin"], names, r["name"])
        py = [r for r in rows if r["cmd"][0] == "python3"]
        for r in py:  # every Python case names a case its program knows
            with open(r["cmd"][1]) as f:
                src = f.read()
            self.assertIn('"%s"' % r["cmd"][2], src, r["name"])


    def test_a_python_case_gets_the_bin_dir(self):
        rows = {r["name"]: r for r in rg.load_cases("mgpu", "/suite/bin", "python3")}
        self.assertEqual(rows["nccl_allreduce_overflow"]["cmd"][2:], ["c_allreduce_overflow", "/suite/bin"])
        self.assertEqual(rows["nccl_torch_allreduce_clean"]["cmd"][2:], ["torch_allreduce_clean"])


class Judge(unittest.TestCase):
    def test_report_matches(self):
        self.assertEqual(rg.judge(CASE, 1, report())[0], True)
        for bad, what in ((dict(line=34), "line"), (dict(kind="heap-use-after-free"), "kind"), (dict(kernel="other"), "kernel"),
                          (dict(access="write"), "access"), (dict(file="/t/gen.py"), "line")):
            ok, got = rg.judge(CASE, 1, report(**bad))
            self.assertFalse(ok, bad)
            self.assertIn(what, got)
        self.assertEqual(rg.judge(CASE, 0, "result ok\n"), (False, "missed (rc=0)"))
        self.assertFalse(rg.judge(dict(CASE, device=1), 1, report())[0])
        self.assertTrue(rg.judge(dict(CASE, line=None), 1, report(file="/t/gen.py", line=9))[0])

    def test_a_library_file_without_a_line(self):
        lib = dict(CASE, line=None, source_file="_triton_ops.py")
        self.assertTrue(rg.judge(lib, 1, report(file="/site-packages/torch/sparse/_triton_ops.py", line=700))[0])
        ok, got = rg.judge(lib, 1, report(file="/t/gen.py", line=9))
        self.assertFalse(ok)
        self.assertIn("file (want _triton_ops.py)", got)

    def test_host_call_reports_are_judged_by_their_call(self):
        case = dict(CASE, kernel="", line=None, access="write", call="ncclAllReduce (recvbuff)")
        host = lambda call: report(kernel=None, file=None, line=None, access="write", call=call)
        self.assertEqual(rg.judge(case, 1, host("ncclAllReduce (recvbuff)")), (True, "heap-buffer-overflow write by ncclAllReduce (recvbuff) dev0"))
        ok, got = rg.judge(case, 1, host("cuMemcpyDtoD"))
        self.assertFalse(ok)
        self.assertIn("call (want ncclAllReduce (recvbuff))", got)

    def test_kind_list(self):
        either = dict(CASE, kind=["heap-buffer-overflow", "tag-mismatch"])
        self.assertTrue(rg.judge(either, 1, report(kind="tag-mismatch"))[0])
        self.assertTrue(rg.judge(either, 1, report())[0])
        ok, got = rg.judge(either, 1, report(kind="heap-use-after-free"))
        self.assertFalse(ok)
        self.assertIn("kind", got)

    def test_clean(self):
        clean = {"name": "c", "expect": "clean"}
        self.assertEqual(rg.judge(clean, 0, "result ok\n"), (True, "silent"))
        self.assertFalse(rg.judge(clean, 0, report() + "result ok\n")[0])
        self.assertFalse(rg.judge(clean, 3, "boom\n")[0])

    def test_text_reports_when_no_json(self):
        self.assertEqual(rg.parse_reports("==ERROR: GPUAddressSanitizer: heap-use-after-free on address"), [{"kind": "heap-use-after-free"}])

    def test_timings_a_case_prints(self):
        self.assertEqual(rg.seconds("x\ncompile_seconds 2.5\nloop_seconds 0.125\n", "loop"), 0.125)
        self.assertEqual(rg.seconds("x\ncompile_seconds 2.5\n", "compile"), 2.5)
        self.assertIsNone(rg.seconds("no loop_seconds here", "loop"))

    def test_pending(self):
        self.assertEqual(rg.verdict({"until": "issue 39 item 1: x"}, False), "XFAIL")
        self.assertEqual(rg.verdict({"until": "issue 39 item 1: x"}, True), "XPASS")
        self.assertEqual(rg.verdict({}, False), "FAIL")


class WholeRun(unittest.TestCase):
    def test_table_with_stand_ins(self):
        """Suite programs replaced by a script: native runs print 'result ok'; the stand-in gasan-run
        reports every non-clean run of k_visible_write at its marker line and passes the rest."""
        with tempfile.TemporaryDirectory() as d:
            bins = os.path.join(d, "suite")
            os.mkdir(bins)
            prog = ("#!/bin/sh\n[ \"$1\" = clean ] || [ \"$(basename $0)\" != ipc_overflow ] || { echo 'SKIPPED: stand-in'; exit 77; }\n"
                    "[ \"$1\" != clean ] || [ \"$(basename $0)\" != mgpu_peer_read ] || { echo 'CUDA error 100'; exit 3; }\necho result ok\n")
            for c in rg.load_json(os.path.join(rg.ROOT, "tests", "expectations.json"))["cases"]:
                if c.get("group") == "mgpu":
                    executable(os.path.join(bins, c["program"]), prog)
            line = rg.marker_line(os.path.join(rg.ROOT, "tests", "suite", "visible_devices_overflow.cu"), "visible_devices_overflow")
            fake = os.path.join(d, "gasan-run")
            executable(fake, "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift\n"
                                  "case \"$*\" in *clean*) exec \"$@\";; esac\n"
                                  "echo '{\"tool\":\"gasan\",\"kind\":\"heap-buffer-overflow\",\"access\":\"write\",\"kernel\":\"k_visible_write\",\"file\":\"visible_devices_overflow.cu\",\"line\":%d,\"device\":0}'\nexit 1\n" % line)
            only = "visible_devices_overflow,visible_devices_overflow_clean,ipc_overflow,mgpu_device1_overflow,mgpu_device1_overflow_clean,mgpu_peer_read,mgpu_peer_read_clean"
            p = subprocess.run([sys.executable, os.path.join(HERE, "run_groups.py"), "--group", "mgpu", "--gasan", fake, "--bin-dir", bins,
                                "--no-sanitizer", "--out", os.path.join(d, "out"), "--only", only], capture_output=True, text=True)
            out = p.stdout
            self.assertEqual(p.returncode, 0, out + p.stderr)
            self.assertRegex(out, r"\| visible_devices_overflow \| report \| ok \| PASS \|")
            self.assertRegex(out, r"\| visible_devices_overflow_clean \| clean \| ok \| PASS \| silent")
            self.assertRegex(out, r"\| ipc_overflow \| report \| skip \| SKIP \|.*stand-in")
            # Reported, but by the wrong kernel: pending, so XFAIL with the reason, not FAIL.
            self.assertRegex(out, r"\| mgpu_device1_overflow \| report \| ok \| XFAIL \| wrong kernel.*expected to fail until issue 40 item 1 is done")
            self.assertRegex(out, r"\| mgpu_device1_overflow_clean \| clean \| ok \| PASS \| silent .*vacuous until issue 40 item 1")
            # A clean twin that fails natively: it and its bug case are SKIPs.
            self.assertRegex(out, r"\| mgpu_peer_read_clean \| clean \| rc=3 \| SKIP \|.*fails natively \(rc=3\): CUDA error 100")
            self.assertRegex(out, r"\| mgpu_peer_read \| report \| ok \| SKIP \|.*its clean twin: fails natively")
            self.assertIn("PASS 3, FAIL 0, XFAIL 1, XPASS 0, SKIP 3", out)
            # A gasan that reports nothing: the case that is not pending FAILs (exit 1); Python
            # cases whose framework is missing here are SKIPs.
            silent = os.path.join(d, "gasan-silent")
            executable(silent, "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift\nexec \"$@\"\n")
            p = subprocess.run([sys.executable, os.path.join(HERE, "run_groups.py"), "--group", "mgpu", "--gasan", silent, "--bin-dir", bins,
                                "--no-sanitizer", "--out", os.path.join(d, "out"), "--only", "visible_devices_overflow,mgpu_device1_overflow"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertRegex(p.stdout, r"\| visible_devices_overflow \| report \| ok \| FAIL \| missed")
            self.assertRegex(p.stdout, r"\| mgpu_device1_overflow \| report \| ok \| XFAIL \| missed")
            # A Python case that runs its own program from --bin-dir (nccl_cases.py execs it): a
            # stand-in program, and a stand-in gasan-run reporting the NCCL call of the bug run.
            executable(os.path.join(bins, "nccl_allreduce"), "#!/bin/sh\necho result ok\n")
            nccl_gasan = os.path.join(d, "gasan-nccl")
            executable(nccl_gasan, "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift\n"
                                   "case \"$*\" in *_clean*) exec \"$@\";; esac\n"
                                   "echo '{\"tool\":\"gasan\",\"kind\":\"heap-buffer-overflow\",\"access\":\"write\",\"call\":\"ncclAllReduce (recvbuff)\"}'\nexit 1\n")
            p = subprocess.run([sys.executable, os.path.join(HERE, "run_groups.py"), "--group", "mgpu", "--gasan", nccl_gasan, "--bin-dir", bins,
                                "--no-sanitizer", "--out", os.path.join(d, "out"), "--only", "nccl_allreduce_overflow,nccl_allreduce_clean"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertRegex(p.stdout, r"\| nccl_allreduce_overflow \| report \| ok \| PASS \| heap-buffer-overflow write by ncclAllReduce \(recvbuff\)")
            self.assertRegex(p.stdout, r"\| nccl_allreduce_clean \| clean \| ok \| PASS \| silent")
            bad = subprocess.run([sys.executable, os.path.join(HERE, "run_groups.py"), "--group", "jit", "--only", "nope", "--gasan", fake],
                                 capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("no such case in group jit: nope", bad.stderr)


if __name__ == "__main__":
    unittest.main()
