"""mpi-bench under mpirun, as benchmarks/run_latency_comparison.sh runs it: Open MPI's
collectives verify over the TCP and the shared-memory (vader) BTL, the table and the JSON agree,
the transport label follows the BTL, and unsupported requests are refused."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
MPI_BENCH = os.path.join(ROOT, "benchmarks", "mpi", "mpi_bench")
MPIRUN = shutil.which("mpirun") or "/usr/bin/mpirun"
QUICK = ["-b", "4", "-e", "4K", "-f", "32", "-n", "5", "-w", "1", "--limits", "0"]
BTLS = {
    "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
    "shm": ["--mca", "btl", "self,vader"],
}


def environment():
    env = dict(os.environ)
    # mpirun refuses root unless told twice.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpirun(ranks, transport, *args, pml="ob1"):
    return subprocess.run(
        [MPIRUN, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "pml", pml]
        + BTLS[transport] + [MPI_BENCH] + list(args),
        capture_output=True, text=True, timeout=120, env=environment())


def table_rows(stdout):
    """The data rows of the printed tables (rank 0's only), split into columns."""
    return [line.split() for line in stdout.splitlines()
            if line.split() and line.split()[0].isdigit()]


class MpiBench(unittest.TestCase):
    def check_allreduce(self, transport):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "mpi.json")
            result = mpirun(2, transport, *QUICK, "--json", path)
            self.assertEqual(result.returncode, 0, result.stderr + result.stdout)
            with open(path) as f:
                report = json.load(f)
        self.assertIn("Wrong elements       : 0 OK", result.stdout)
        self.assertEqual(report["schema"], "chorus-bench/1")
        self.assertIsNone(report["limits"])
        (run,) = report["runs"]
        self.assertEqual((run["library"], run["algorithm"], run["transport"], run["store"]),
                         ("openmpi", "default", transport, "mpirun"))
        self.assertEqual(run["ranks"], 2)
        self.assertRegex(run["library_version"], r"^\d+\.\d+\.\d+$")
        self.assertEqual(run["wrong_total"], 0)
        rows = table_rows(result.stdout)
        self.assertEqual([int(row[0]) for row in rows], [4, 128, 4096])
        self.assertEqual([row["bytes"] for row in run["rows"]], [4, 128, 4096])
        for printed, row in zip(rows, run["rows"]):
            self.assertEqual(printed[2:5], ["float32", "sum", "-1"])
            self.assertEqual((printed[8], printed[12]), ("0", "0"))  # out of place, in place
            self.assertEqual(row["out_of_place"]["wrong"], 0)
            self.assertEqual(row["in_place"]["wrong"], 0)
            self.assertAlmostEqual(float(printed[9]), row["in_place"]["time_us"],
                                   delta=0.01 * row["in_place"]["time_us"] + 0.01)

    def test_allreduce_over_tcp_verifies_and_the_json_matches_the_table(self):
        self.check_allreduce("tcp")

    def test_allreduce_over_vader_verifies_and_the_json_matches_the_table(self):
        self.check_allreduce("shm")

    def test_other_reductions_and_broadcast_from_a_non_zero_root_verify(self):
        result = mpirun(2, "shm", *QUICK, "-o", "prod,min,max", "--transport", "shm")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        self.assertEqual([row[3] for row in rows], ["prod"] * 3 + ["min"] * 3 + ["max"] * 3)
        self.assertTrue(all(row[8] == "0" and row[12] == "0" for row in rows))
        result = mpirun(3, "tcp", *QUICK, "--coll", "broadcast", "-r", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = table_rows(result.stdout)
        self.assertEqual(len(rows), 3)
        for row in rows:
            self.assertEqual(row[2:5], ["float32", "none", "2"])
            self.assertEqual(row[5:9], ["N/A"] * 4)  # MPI_Bcast has one buffer
            self.assertEqual(row[12], "0")

    def test_rank_0_alone_measures_the_machine_limits_before_mpi_starts(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "mpi.json")
            result = mpirun(2, "tcp", "-b", "8", "-e", "8", "-n", "2", "-w", "1", "--json", path)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(path) as f:
                limits = json.load(f)["limits"]
        self.assertEqual(result.stdout.count("tcp loopback bidirectional"), 1)
        self.assertLess(result.stdout.index("tcp loopback bidirectional"),
                        result.stdout.index("openmpi-bench"))
        self.assertGreater(limits["memcpy_gbps"], 0)
        self.assertGreater(limits["cache_line_handoff_median_ns"], 0)

    def test_a_label_that_contradicts_the_btl_is_refused(self):
        result = mpirun(2, "shm", *QUICK, "--transport", "tcp")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--transport tcp contradicts mpirun's --mca btl self,vader", result.stderr)
        result = mpirun(2, "tcp", *QUICK, pml="ucx")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("use --mca pml ob1", result.stderr)

    def test_unsupported_requests_are_refused_with_the_alternatives(self):
        for args, message in (
                (["--coll", "alltoall"], "measures allreduce, broadcast and barrier, not alltoall"),
                (["-d", "float16"], "float32 only"),
                (["-o", "avg"], "no avg reduction"),
                (["--algo", "ring"], "--algo default")):
            result = mpirun(2, "tcp", *QUICK, *args)
            self.assertNotEqual(result.returncode, 0, args)
            self.assertIn(message, result.stderr, args)


if __name__ == "__main__":
    unittest.main()
