"""chorus-bench under chorusrun over a file store, as a user runs it: every collective verifies
exactly (#wrong == 0) in both modes on 2 and 3 ranks for a few types and ops, the JSON matches
the table, `auto` names the algorithm it picked, and bad requests are refused by name."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CHORUSRUN = os.path.join(ROOT, "integrations", "launcher", "chorusrun.py")
CHORUS_BENCH = os.path.join(ROOT, "benchmarks", "chorus_bench")
QUICK = ["-b", "8", "-e", "48K", "-f", "8", "-n", "2", "-w", "1", "--limits", "0"]


def run_bench(ranks, *args):
    return subprocess.run(
        [sys.executable, CHORUSRUN, "-n", str(ranks), "--store", "file", "--timeout", "150",
         "--", CHORUS_BENCH] + list(args),
        capture_output=True, text=True, timeout=180)


def table_rows(stdout):
    """The data rows rank 0 printed, split into columns."""
    rows = []
    for line in stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["[rank", "0]"] and len(fields) > 2 and fields[2].isdigit():
            rows.append(fields[2:])
    return rows


class ChorusBench(unittest.TestCase):
    def assert_all_verified(self, result, expected_rows):
        self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
        rows = table_rows(result.stdout)
        self.assertEqual(len(rows), expected_rows, result.stdout)
        for row in rows:
            # out-of-place and in-place both measured and both exact
            self.assertNotIn("N/A", row[5:13], row)
            self.assertEqual((row[8], row[12]), ("0", "0"), row)
        return rows

    def test_every_collective_verifies_on_2_and_3_ranks(self):
        cases = [
            ("allreduce", "float32", "sum"), ("allreduce", "int32", "max"),
            ("allreduce", "bfloat16", "avg"), ("reduce", "float64", "prod"),
            ("broadcast", "int8", "sum"), ("allgather", "float16", "sum"),
            ("reduce_scatter", "float32", "sum"), ("reduce_scatter", "int64", "min"),
            ("alltoall", "int32", "sum"),
        ]
        for ranks in (2, 3):
            for coll, dtype, op in cases:
                with self.subTest(ranks=ranks, coll=coll, dtype=dtype, op=op):
                    result = run_bench(ranks, *QUICK, "--coll", coll, "-d", dtype, "-o", op,
                                       "-r", str(ranks - 1))
                    # 8, 64, 512, 4K, 32K (rounded to whole elements x ranks where split)
                    self.assert_all_verified(result, 5)

    def test_every_allreduce_algorithm_and_auto_and_the_json_matches_the_table(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "chorus.json")
            result = run_bench(3, *QUICK, "--algo", "all,auto", "--json", path)
            with open(path) as f:
                report = json.load(f)
        self.assertEqual(report["schema"], "chorus-bench/1")
        self.assertIsNone(report["limits"])
        algorithms = [run["algorithm"] for run in report["runs"]]
        self.assertIn("ring", algorithms)
        self.assertTrue(algorithms[-1].startswith("auto ("), algorithms)
        self.assertIn("# auto picked: " + algorithms[-1], result.stdout)
        rows = self.assert_all_verified(result, 5 * len(algorithms))
        json_rows = [row for run in report["runs"] for row in run["rows"]]
        for printed, row in zip(rows, json_rows):
            self.assertEqual(int(printed[0]), row["bytes"])
            self.assertEqual(row["out_of_place"]["wrong"], 0)
            self.assertEqual(row["in_place"]["wrong"], 0)
            self.assertAlmostEqual(float(printed[5]), row["out_of_place"]["time_us"],
                                   delta=0.01 * row["out_of_place"]["time_us"] + 0.01)
        for run in report["runs"]:
            self.assertEqual((run["library"], run["transport"], run["store"], run["ranks"]),
                             ("chorus", "tcp", "file", 3))
            self.assertEqual(run["wrong_total"], 0)

    def test_every_type_and_op_in_one_run_over_shm(self):
        result = run_bench(2, "-b", "64", "-e", "4K", "-f", "64", "-n", "1", "-w", "0",
                           "--limits", "0", "-d", "all", "-o", "all", "--transport", "shm")
        rows = self.assert_all_verified(result, 12 * 5 * 2)  # types x ops x (64 B, 4 KiB)
        printed = {(row[2], row[3]) for row in rows}
        self.assertEqual(len(printed), 60, printed)
        self.assertIn(("bfloat16", "avg"), printed)
        self.assertIn(("int16", "min"), printed)
        self.assertIn(("uint16", "prod"), printed)
        self.assertIn(("uint64", "prod"), printed)

    def test_chorus_transport_is_the_default_and_the_flag_wins(self):
        os.environ["CHORUS_TRANSPORT"] = "shm"
        try:
            from_env = run_bench(2, *QUICK, "--coll", "allreduce")
            flag_wins = run_bench(2, *QUICK, "--coll", "allreduce", "--transport", "tcp")
        finally:
            del os.environ["CHORUS_TRANSPORT"]
        self.assert_all_verified(from_env, 5)
        self.assertIn("transport shm,", from_env.stdout)
        self.assert_all_verified(flag_wins, 5)
        self.assertIn("transport tcp,", flag_wins.stdout)
        default = run_bench(2, *QUICK, "--coll", "allreduce")
        self.assertIn("transport tcp,", default.stdout)

    def test_auto_transport_on_one_host_verifies(self):
        # One host: the hybrid device routes every peer to shared memory.
        result = run_bench(3, *QUICK, "--transport", "auto")
        self.assert_all_verified(result, 5)

    def test_shared_memory_buffers_verify_over_shm(self):
        # Up to 4 MiB: the large messages are read in place from the peer's arena.
        result = run_bench(2, "-b", "64K", "-e", "4M", "-f", "8", "-n", "2", "-w", "1",
                           "--limits", "0", "--transport", "shm", "--buffers", "shared",
                           "--coll", "allreduce")
        self.assert_all_verified(result, 3)
        result = run_bench(2, "-b", "64K", "-e", "4M", "-f", "8", "-n", "2", "-w", "1",
                           "--limits", "0", "--transport", "shm", "--buffers", "shared",
                           "--coll", "allgather")
        self.assert_all_verified(result, 3)

    def test_ranks_sharing_one_cpu_verify_over_shm(self):
        # Both ranks on CPU 0, each believing it has a core: the slots and the shared buffers
        # up to 64 KiB, then messages; every wait must hand the core over to the other rank.
        for coll in ("allreduce", "broadcast", "barrier"):
            with self.subTest(coll=coll):
                result = run_bench(2, "-b", "8", "-e", "256K", "-f", "8", "-n", "200", "-w", "20",
                                   "--limits", "0", "--transport", "shm", "--cpu", "0",
                                   "--coll", coll)
                self.assertIn("collectives run on CPU 0 only", result.stdout)
                if coll == "barrier":  # no buffers to verify
                    self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
                    self.assertEqual(len(table_rows(result.stdout)), 1, result.stdout)
                else:
                    self.assert_all_verified(result, 6)

    def test_barrier_and_the_machine_limits(self):
        result = run_bench(2, "--coll", "barrier", "-n", "3", "-w", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertLess(result.stdout.index("tcp loopback bidirectional"),
                        result.stdout.index("chorus-bench"))
        self.assertEqual(len(table_rows(result.stdout)), 1)

    def test_bad_requests_are_refused_with_the_alternatives(self):
        result = run_bench(2, *QUICK, "--algo", "bcube")
        self.assertIn(result.returncode, (100, 101), result.stderr)
        self.assertIn("no allreduce algorithm 'bcube'; choose from", result.stderr)
        result = run_bench(2, *QUICK, "--transport", "carrier-pigeon")
        self.assertIn("no transport 'carrier-pigeon'; choose from tcp", result.stderr)
        result = run_bench(2, *QUICK, "--cpu", str(os.cpu_count() + 4096))
        self.assertIn("--cpu: '%d' is not a CPU this process may run on" % (os.cpu_count() + 4096),
                      result.stderr)
        result = run_bench(2, *QUICK, "--buffers", "pinned")
        self.assertIn("--buffers: 'pinned' is not heap, shared or cuda", result.stderr)
        # The suite's chorus_bench is a build without CUDA support.
        result = run_bench(2, *QUICK, "--buffers", "cuda")
        self.assertIn("built without CUDA support (build it with --config=cuda", result.stderr)


if __name__ == "__main__":
    unittest.main()
