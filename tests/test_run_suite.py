"""Unit tests of the suite runner's and bench harness's table logic on recorded outputs."""
import importlib.util, json, os, unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


rs = load(os.path.join(HERE, "run_suite.py"), "run_suite")
rb = load(os.path.join(HERE, "..", "benches", "run_benches.py"), "run_benches")
fx = lambda n: open(os.path.join(HERE, "fixtures", n)).read()
CASE = {"name": "underflow_read", "cls": "heap-underflow", "kind": "heap-buffer-overflow", "host_call": False,
        "expect": {"gasan_s8": True, "gasan_s7": True, "gasan_sass": False, "compute_sanitizer": True}}


class Parsing(unittest.TestCase):
    def test_gasan_report_kind_and_line(self):
        self.assertEqual(rs.parse_gasan(fx("gasan_overflow.txt")), [("heap-buffer-overflow", 24)])
        self.assertEqual(rs.parse_gasan(fx("gasan_double_free.txt")), [("double-free", None)])
        self.assertEqual(rs.parse_gasan(fx("clean.txt")), [])

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


class Expectations(unittest.TestCase):
    def test_expectations_name_programs_and_markers(self):
        exp = json.load(open(os.path.join(HERE, "expectations.json")))
        src = os.path.join(HERE, exp["source"])
        text = open(src).read()
        lines = rs.bug_lines(src)
        self.assertGreaterEqual(sum(1 for c in exp["cases"] if c["cls"] != "not-covered-yet"), 40)
        for c in exp["cases"]:
            self.assertIn(f"C({c['name']})", text, c["name"])
            self.assertIn(c["name"], lines, f"no BUG marker for {c['name']}")
            self.assertTrue(set(c["expect"]) >= {"gasan_s8", "gasan_s7", "gasan_sass", "compute_sanitizer"})


if __name__ == "__main__":
    unittest.main()
