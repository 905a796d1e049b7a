"""gloo-bench under chorusrun, as a user runs it: every Gloo algorithm verifies exactly on a
rank count it supports, the table and the JSON agree, errors name what is unsupported, and a
wrong result makes the run fail."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CHORUSRUN = os.path.join(ROOT, "integrations", "launcher", "chorusrun.py")
GLOO_BENCH = os.path.join(ROOT, "benchmarks", "gloo", "gloo_bench")
QUICK = ["-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "--limits", "0"]


def run_bench(ranks, *args, store="file"):
    return subprocess.run(
        [sys.executable, CHORUSRUN, "-n", str(ranks), "--store", store, "--timeout", "100",
         "--", GLOO_BENCH] + list(args),
        capture_output=True, text=True, timeout=120)


def table_rows(stdout):
    """The data rows of the printed tables, split into columns."""
    rows = []
    for line in stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["[rank", "0]"] and len(fields) > 2 and fields[2].isdigit():
            rows.append(fields[2:])
    return rows


class GlooBench(unittest.TestCase):
    def test_gloo_allreduce_algorithms_verify_and_the_json_matches_the_table(self):
        # bcube is left out: on 4 ranks Gloo's bcube returns wrong sums in some runs (seen
        # here under load: 3910 wrong elements at 32 KiB), so it cannot be asserted correct.
        # Our verification catching it is what the 3-rank bcube test below checks.
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "gloo.json")
            result = run_bench(4, *QUICK, "--algo", "ring,ring_chunked,halving_doubling",
                               "--json", path)
            self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
            with open(path) as f:
                report = json.load(f)
        self.assertEqual(report["schema"], "chorus-bench/1")
        self.assertIsNone(report["limits"])
        self.assertEqual([run["algorithm"] for run in report["runs"]],
                         ["ring", "ring_chunked", "halving_doubling"])
        rows = table_rows(result.stdout)
        self.assertEqual(len(rows), 3 * 5)  # 8, 64, 512, 4K, 32K per algorithm
        json_rows = [row for run in report["runs"] for row in run["rows"]]
        for printed, row in zip(rows, json_rows):
            self.assertEqual(int(printed[0]), row["bytes"])
            self.assertEqual(int(printed[1]), row["count"])
            self.assertEqual(printed[2:5], ["float32", "sum", "-1"])
            self.assertEqual(printed[5:9], ["N/A"] * 4)  # Gloo reduces in place only
            self.assertIsNone(row["out_of_place"])
            self.assertEqual(printed[12], "0")
            self.assertEqual(row["in_place"]["wrong"], 0)
            self.assertAlmostEqual(float(printed[9]), row["in_place"]["time_us"],
                                   delta=0.01 * row["in_place"]["time_us"] + 0.01)
        for run in report["runs"]:
            self.assertEqual(run["ranks"], 4)
            self.assertEqual(run["library"], "gloo")
            self.assertEqual(run["store"], "file")
            self.assertEqual(run["wrong_total"], 0)

    def test_machine_limits_are_printed_before_the_sweep(self):
        result = run_bench(2, "-b", "1K", "-e", "1K", "-n", "2", "-w", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        limits = result.stdout.index("tcp loopback bidirectional")
        self.assertLess(limits, result.stdout.index("gloo-bench 0.5.0: allreduce"))

    def test_broadcast_from_a_non_zero_root_through_redis(self):
        result = run_bench(3, *QUICK, "--coll", "broadcast", "-r", "2", store="redis")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        self.assertEqual(len(rows), 5)
        for row in rows:
            self.assertEqual(row[2:5], ["float32", "none", "2"])
            self.assertEqual(row[12], "0")
        self.assertIn("store redis", result.stdout)

    def test_reductions_other_than_sum_verify(self):
        for op in ("prod", "min", "max"):
            result = run_bench(2, *QUICK, "-o", op)
            self.assertEqual(result.returncode, 0, op + result.stderr)
            self.assertTrue(all(row[3] == op and row[12] == "0"
                                for row in table_rows(result.stdout)))

    def test_bcube_on_a_rank_count_it_does_not_support_is_caught_as_wrong(self):
        # Gloo's bcube needs the rank count divisible by its base (2); on 3 ranks it returns
        # wrong sums without an error. The verification must catch that and fail the run.
        result = run_bench(3, *QUICK, "--algo", "bcube")
        # Every rank fails; the code names whichever ended first.
        self.assertIn(result.returncode, (100, 101, 102), result.stderr)
        self.assertIn("verification failed", result.stderr)
        self.assertIn("in gloo bcube allreduce", result.stderr)
        self.assertTrue(any(row[12] != "0" for row in table_rows(result.stdout)))

    def test_unsupported_requests_are_refused_with_the_alternatives(self):
        result = run_bench(2, *QUICK, "--coll", "alltoall")
        self.assertIn(result.returncode, (100, 101), result.stderr)
        self.assertIn("measures allreduce, broadcast and barrier, not alltoall", result.stderr)
        result = run_bench(2, *QUICK, "--algo", "tree")
        self.assertIn("no allreduce algorithm 'tree'; choose from ring, ring_chunked",
                      result.stderr)
        result = run_bench(2, *QUICK, "-d", "float16")
        self.assertIn("float32 only", result.stderr)
        result = run_bench(2, *QUICK, "-o", "avg")
        self.assertIn("no avg reduction", result.stderr)


if __name__ == "__main__":
    unittest.main()
