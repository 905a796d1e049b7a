"""compare.py and plot.py on hand-made reports (exact ratios) and on real gloo-bench output."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
COMPARE = os.path.join(ROOT, "benchmarks", "compare.py")
PLOT = os.path.join(ROOT, "benchmarks", "plot.py")
CHORUSRUN = os.path.join(ROOT, "integrations", "launcher", "chorusrun.py")
GLOO_BENCH = os.path.join(ROOT, "benchmarks", "gloo", "gloo_bench")
# plot.py needs Debian's python3-matplotlib, installed for /usr/bin/python3.
PLOT_PYTHON = "/usr/bin/python3"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def mode(time_us, busbw):
    return {"time_us": time_us, "algbw_gbps": busbw, "busbw_gbps": busbw, "wrong": 0}


def report(library, algorithm, rows, ranks=4, collective="allreduce", hostname="host1"):
    """rows: (bytes, time_us, busbw) in place."""
    return {
        "schema": "chorus-bench/1", "command": "x", "started_at": "2026-01-01T00:00:00Z",
        "machine": {"hostname": hostname},
        "limits": {"memcpy_gbps": 20, "reduce_float_sum_gbps": 8, "tcp_one_way_gbps": 4,
                   "tcp_bidirectional_gbps_per_direction": 2, "tcp_rtt_median_us": 20},
        "runs": [{"library": library, "algorithm": algorithm, "collective": collective,
                  "ranks": ranks, "transport": "tcp",
                  "rows": [{"bytes": b, "count": b // 4, "out_of_place": None,
                            "in_place": mode(t, bw)} for b, t, bw in rows]}],
    }


class Scratch(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory()
        self.addCleanup(self.scratch.cleanup)

    def write(self, name, content):
        path = os.path.join(self.scratch.name, name)
        with open(path, "w") as f:
            json.dump(content, f)
        return path

    def compare(self, *args):
        return subprocess.run([sys.executable, COMPARE] + list(args), capture_output=True,
                              text=True, timeout=60)

    def plot(self, *args):
        return subprocess.run([PLOT_PYTHON, PLOT] + list(args), capture_output=True, text=True,
                              timeout=120)


class Compare(Scratch):
    def test_ratio_per_size_over_the_union_of_sizes(self):
        a = self.write("a.json", report("chorus", "ring", [(8, 10.0, 2.0), (16, 20.0, 4.0)]))
        b = self.write("b.json", report("gloo", "ring", [(8, 20.0, 1.0), (16, 80.0, 1.0),
                                                         (32, 90.0, 1.0)]))
        result = self.compare(a, b)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        self.assertIn("# A: chorus ring, allreduce, 4 ranks", lines[0])
        self.assertIn("tcp one-way 4.00 GB/s", lines[0])
        self.assertIn("# B: gloo ring", lines[1])
        data = [line.split() for line in lines if not line.startswith("#")]
        self.assertEqual(data, [
            ["8", "10.00", "2", "20.00", "1", "2.00"],
            ["16", "20.00", "4", "80.00", "1", "4.00"],
            ["32", "-", "-", "90.00", "1", "-"],
        ])
        self.assertIn("# geometric mean ratio over 2 sizes: 2.83", result.stdout)

    def test_barrier_compares_times(self):
        a = self.write("a.json", report("chorus", "x", [(0, 10.0, 0.0)], collective="barrier"))
        b = self.write("b.json", report("gloo", "y", [(0, 30.0, 0.0)], collective="barrier"))
        result = self.compare(a, b)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ratio = time(B) / time(A)", result.stdout)
        self.assertIn(["0", "10.00", "0", "30.00", "0", "3.00"],
                      [line.split() for line in result.stdout.splitlines()])

    def test_mismatched_runs_are_flagged(self):
        a = self.write("a.json", report("chorus", "ring", [(8, 1.0, 1.0)], ranks=4))
        b = self.write("b.json", report("gloo", "ring", [(8, 1.0, 1.0)], ranks=2,
                                        hostname="host2"))
        result = self.compare(a, b)
        self.assertIn("WARNING: different rank counts (4 vs 2)", result.stdout)
        self.assertIn("WARNING: measured on different machines (host1 vs host2)", result.stdout)

    def test_errors_name_the_file_and_what_it_has(self):
        a = self.write("a.json", report("chorus", "ring", [(8, 1.0, 1.0)]))
        b = self.write("b.json", report("gloo", "bcube", [(8, 1.0, 1.0)]))
        result = self.compare(a, b, "--algo-b", "ring")
        self.assertEqual(result.returncode, 1)
        self.assertIn("has no run matching collective=any algorithm=ring (it has: "
                      "allreduce/bcube)", result.stderr)
        bad = self.write("bad.json", {"schema": "other"})
        result = self.compare(a, bad)
        self.assertEqual(result.returncode, 1)
        self.assertIn("is not a chorus-bench/1 report", result.stderr)
        result = self.compare(a, os.path.join(self.scratch.name, "missing.json"))
        self.assertIn("cannot read", result.stderr)


class Plot(Scratch):
    def test_writes_a_png_with_one_line_per_run(self):
        a = self.write("a.json", report("chorus", "ring", [(8, 1.0, 0.01), (1024, 2.0, 0.5)]))
        b = self.write("b.json", report("gloo", "bcube", [(8, 1.0, 0.02), (1024, 2.0, 0.4)]))
        out = os.path.join(self.scratch.name, "busbw.png")
        result = self.plot("-o", out, a, b)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("2 run(s) plotted", result.stdout)
        with open(out, "rb") as f:
            content = f.read()
        self.assertTrue(content.startswith(PNG_SIGNATURE))
        self.assertGreater(len(content), 10000)

    def test_nothing_to_plot_is_an_error(self):
        a = self.write("a.json", report("chorus", "ring", [(8, 1.0, 0.01)]))
        out = os.path.join(self.scratch.name, "none.png")
        result = self.plot("-o", out, a, "--coll", "broadcast")
        self.assertEqual(result.returncode, 1)
        self.assertIn("no run with in_place measurements of broadcast", result.stderr)
        self.assertFalse(os.path.exists(out))


class RealData(Scratch):
    def gloo_json(self, name, algorithm):
        path = os.path.join(self.scratch.name, name)
        result = subprocess.run(
            [sys.executable, CHORUSRUN, "-n", "2", "--timeout", "100", "--", GLOO_BENCH, "-b",
             "1K", "-e", "256K", "-f", "16", "-n", "3", "-w", "1", "--limits", "0", "--algo",
             algorithm, "--json", path], capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        return path

    def test_compare_and_plot_gloo_bench_output(self):
        ring = self.gloo_json("ring.json", "ring")
        halving = self.gloo_json("hd.json", "halving_doubling")
        result = self.compare(ring, halving)
        self.assertEqual(result.returncode, 0, result.stderr)
        data = [line.split() for line in result.stdout.splitlines() if not line.startswith("#")]
        self.assertEqual([int(row[0]) for row in data], [1024, 16384, 262144])
        for row in data:
            self.assertGreater(float(row[5]), 0)
            self.assertAlmostEqual(float(row[5]), float(row[2]) / float(row[4]), delta=0.01 +
                                   0.02 * float(row[5]))
        out = os.path.join(self.scratch.name, "gloo.png")
        result = self.plot("-o", out, ring, halving)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, "rb") as f:
            self.assertTrue(f.read().startswith(PNG_SIGNATURE))


if __name__ == "__main__":
    unittest.main()
