"""Unit tests of the suite runner's and bench harness's table logic on recorded outputs."""
import importlib.util, json, os, re, unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


rs = load(os.path.join(HERE, "run_suite.py"), "run_suite")
rb = load(os.path.join(HERE, "..", "benches", "run_benches.py"), "run_benches")


def fx(name):
    with open(os.path.join(HERE, "fixtures", name)) as f:
        return f.read()


CASE = {"name": "underflow_read", "cls": "heap-underflow", "kind": "heap-buffer-overflow", "host_call": False,
        "expect": {"gasan_s8": True, "gasan_s7": True, "gasan_sass": False, "compute_sanitizer": True}}


class Parsing(unittest.TestCase):
    def test_gasan_report_kind_and_line(self):
        self.assertEqual(rs.parse_gasan(fx("gasan_overflow.txt")), [("heap-buffer-overflow", 24)])
        self.assertEqual(rs.parse_gasan(fx("gasan_double_free.txt")), [("double-free", None)])
        self.assertEqual(rs.parse_gasan(fx("clean.txt")), [])

    def test_gasan_json_reports(self):
        out = ('result line\n{"tool":"gasan","kind":"tag-mismatch","file":"/x/tag.cu","line":12,"address":"0x1"}\n'
               '==gasan== 63 more bad device access(es) not reported\n'
               '{"tool":"gasan","kind":"heap-buffer-overflow","call":"cuMemcpyDtoH_v2"}\n{not json\n')
        self.assertEqual(rs.parse_gasan(out), [("tag-mismatch", 12), ("heap-buffer-overflow", None)])
        # A JSON report wins over text, and other tools' JSON is not a gasan report.
        self.assertEqual(rs.parse_gasan('{"tool":"other","kind":"x"}\n'), [])
        self.assertEqual(rs.parse_gasan('{"tool":"gasan","kind":"k","file":"/i/x.hpp","line":107}\n'), [("k", None)])

    def test_cs_summary(self):
        self.assertEqual(rs.parse_cs(fx("cs_overflow.txt")), 1)
        self.assertEqual(rs.parse_cs(fx("cs_clean.txt")), 0)
        self.assertIsNone(rs.parse_cs("killed"))

    def test_bench_line(self):
        self.assertEqual(rb.parse_bench("x\nBENCH name=triad median_ms=0.151 reps=15 checksum=3\n"), ("triad", 0.151, "3"))
        self.assertIsNone(rb.parse_bench("no result"))
        self.assertAlmostEqual(rb.geomean([1.0, 4.0]), 2.0)


class Classification(unittest.TestCase):
    def test_detected_missed_false_wrong(self):
        self.assertEqual(rs.classify_gasan(CASE, 24, fx("gasan_overflow.txt"), fx("clean.txt")), "detected")
        self.assertEqual(rs.classify_gasan(CASE, 24, fx("clean.txt"), fx("clean.txt")), "missed")
        self.assertEqual(rs.classify_gasan(CASE, 24, fx("gasan_overflow.txt"), fx("gasan_overflow.txt")), "false-report")
        self.assertEqual(rs.classify_gasan(CASE, 30, fx("gasan_overflow.txt"), fx("clean.txt")), "wrong-report")
        self.assertEqual(rs.classify_gasan(dict(CASE, kind="double-free"), 24, fx("gasan_overflow.txt"), fx("clean.txt")), "wrong-report")
        self.assertEqual(rs.classify_cs(fx("cs_overflow.txt"), fx("cs_clean.txt")), "detected")
        self.assertEqual(rs.classify_cs(fx("cs_clean.txt"), fx("cs_overflow.txt")), "false-report")

    def test_regressions_and_rates(self):
        cases = [CASE, dict(CASE, name="x", cls="c2", expect=dict(CASE["expect"], gasan_s8=False))]
        res = {("underflow_read", "gasan-s8"): "missed", ("x", "gasan-s8"): "missed", ("x", "gasan-s7"): "detected"}
        self.assertEqual(rs.regressions(cases, res), ["underflow_read gasan-s8: missed"])
        self.assertEqual(rs.rates(cases, res, "gasan-s8"), {"heap-underflow": (0, 1), "c2": (0, 1)})
        table = rs.render(cases, res, ["gasan-s8", "gasan-s7"])
        self.assertIn("| underflow_read | heap-underflow | · | — |", table)
        self.assertIn("| **all** | **0/2** | **1/1** |", table)

    def test_a_case_this_machine_cannot_run_is_skipped_not_missed(self):
        # A two-GPU case on one GPU exits 77 with its SKIPPED line, natively and under gasan.
        self.assertEqual(rs.skipped(77, "x\nSKIPPED: needs 2 GPUs, this machine has 1\n"), "SKIPPED: needs 2 GPUs, this machine has 1")
        self.assertIsNone(rs.skipped(0, "SKIPPED: printed but the program ran on"))
        self.assertIsNone(rs.skipped(1, "heap-buffer-overflow"))
        res = {("underflow_read", "gasan-s8"): "skipped"}
        self.assertEqual(rs.regressions([CASE], res), [])
        self.assertEqual(rs.rates([CASE], res, "gasan-s8"), {})
        self.assertIn("| underflow_read | heap-underflow | skip |", rs.render([CASE], res, ["gasan-s8"]))


class Expectations(unittest.TestCase):
    with open(os.path.join(HERE, "expectations.json")) as f:
        exp = json.load(f)

    def test_expectations_name_programs_and_markers(self):
        cases = self.exp["cases"]
        self.assertGreaterEqual(sum(1 for c in cases if c["cls"] != "not-covered-yet"), 40)
        self.assertEqual(len({c["name"] for c in cases}), len(cases), "duplicate case names")
        self.assertEqual(len({c["program"] for c in cases}), len(cases), "two cases share a program")
        for c in cases:
            self.assertTrue(set(c) >= {"name", "program", "source", "cls", "kind", "access", "size", "kernel", "host_call", "expect"}, c["name"])
            self.assertTrue(set(c["expect"]) >= {"gasan_s8", "gasan_s7", "gasan_sass", "compute_sanitizer"}, c["name"])

    def test_every_expectation_has_its_source_with_one_marker(self):
        for c in self.exp["cases"]:
            src = os.path.join(HERE, c["source"])
            self.assertTrue(os.path.isfile(src), f"{c['name']}: no source {c['source']}")
            with open(src) as f:
                text = f.read()
            markers = re.findall(r"BUG:([a-z0-9_]+)", text)
            self.assertEqual(markers, [c["name"]], f"{c['source']}: markers {markers}, want exactly one BUG:{c['name']}")
            self.assertEqual(rs.bug_line(c), rs.bug_lines(src)[c["name"]])
            self.assertIn("BUG:" + c["name"], text.splitlines()[rs.bug_line(c) - 1])
            if not c["host_call"] and c["kernel"]:
                self.assertRegex(text, r"__(global|device)__[^(]*\b%s\(" % re.escape(c["kernel"]), f"{c['name']}: no kernel {c['kernel']}")

    def test_every_program_has_an_expectation(self):
        progs = {f[:-3] for f in os.listdir(os.path.join(HERE, "suite")) if f.endswith(".cu")}
        self.assertEqual(progs, {os.path.splitext(os.path.basename(c["source"]))[0] for c in self.exp["cases"]})
        self.assertTrue(all(c["program"] == os.path.splitext(os.path.basename(c["source"]))[0] for c in self.exp["cases"]))


if __name__ == "__main__":
    unittest.main()
