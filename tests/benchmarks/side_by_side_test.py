"""side_by_side.py on hand-made reports: medians over rounds, Gloo's best algorithm, the winner
column and its ratios, the win/loss count, the limits block and --markdown-out."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SIDE_BY_SIDE = os.path.join(ROOT, "benchmarks", "side_by_side.py")

LIMITS = {"memcpy_gbps": 18.5, "reduce_float_sum_gbps": 8.25, "tcp_one_way_gbps": 2.9,
          "tcp_bidirectional_gbps_per_direction": 1.45, "tcp_rtt_median_us": 12.4,
          "tcp_rtt_busy_poll_median_us": 7.3, "cache_line_handoff_median_ns": 65}


def run(library, algorithm, transport, ranks, rows, collective="allreduce"):
    """rows: (bytes, in-place time in us[, wrong])."""
    return {"library": library, "library_version": "1.0", "collective": collective,
            "algorithm": algorithm, "transport": transport, "ranks": ranks,
            "rows": [{"bytes": row[0], "count": row[0] // 4,
                      "out_of_place": None,
                      "in_place": {"time_us": row[1], "algbw_gbps": 0, "busbw_gbps": 0,
                                   "wrong": row[2] if len(row) > 2 else 0}}
                     for row in rows]}


def report(*runs, limits=None):
    return {"schema": "chorus-bench/1", "command": "x", "started_at": "2026-01-01T00:00:00Z",
            "machine": {"hostname": "host1", "cpu_model": "AMD EPYC", "online_cores": 2},
            "limits": limits, "runs": list(runs)}


class SideBySide(unittest.TestCase):
    def setUp(self):
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.scratch = scratch.name
        self.files = []

    def write(self, name, content):
        path = os.path.join(self.scratch, name)
        with open(path, "w") as f:
            json.dump(content, f)
        self.files.append(path)
        return path

    def side_by_side(self, *args):
        result = subprocess.run([sys.executable, SIDE_BY_SIDE] + list(args) + self.files,
                                capture_output=True, text=True, timeout=60)
        return result

    def table(self, stdout):
        """{(ranks, transport, size): [chorus, mpi, gloo, winner]} from the markdown rows."""
        cells = {}
        for line in stdout.splitlines():
            fields = [field.strip() for field in line.strip("|").split("|")]
            if len(fields) == 7 and fields[0].isdigit():
                cells[(int(fields[0]), fields[1], fields[2])] = fields[3:]
        return cells

    def write_three_rounds(self):
        # Chorus: 2 ranks tcp, 3 rounds; the median of 10, 30, 20 is 20.
        for i, (t4, t1m) in enumerate([(10.0, 900.0), (30.0, 1100.0), (20.0, 1000.0)]):
            self.write("r%d-chorus.json" % i, report(
                run("chorus", "auto (ring)", "tcp", 2, [(4, t4), (1 << 20, t1m)]),
                limits=LIMITS if i == 0 else None))
        # Open MPI: 4 B median 8 (MPI wins by 20/8 = 2.5x); 1 MiB median 1500, behind Gloo.
        for i, (t4, t1m) in enumerate([(8.0, 1500.0), (7.0, 1400.0), (9.0, 1600.0)]):
            self.write("r%d-openmpi.json" % i, report(
                run("openmpi", "default", "tcp", 2, [(4, t4), (1 << 20, t1m)])))
        # Gloo: per round the best algorithm counts: 4 B 40, 50, 60 -> 50; 1 MiB 1200 in every
        # round, from a different algorithm each time.
        for i, (ring, halving) in enumerate([((40.0, 1200.0), (45.0, 1300.0)),
                                             ((80.0, 1250.0), (50.0, 1200.0)),
                                             ((60.0, 1200.0), (70.0, 1400.0))]):
            self.write("r%d-gloo.json" % i, report(
                run("gloo", "ring", "tcp", 2, [(4, ring[0]), (1 << 20, ring[1])]),
                run("gloo", "halving_doubling", "tcp", 2,
                    [(4, halving[0]), (1 << 20, halving[1])])))

    def test_medians_best_gloo_algorithm_winners_and_ratios(self):
        self.write_three_rounds()
        result = self.side_by_side()
        self.assertEqual(result.returncode, 0, result.stderr)
        cells = self.table(result.stdout)
        self.assertEqual(cells[(2, "tcp", "4 B")], ["20.00", "8.00", "50.00", "MPI by 2.50x"])
        self.assertEqual(cells[(2, "tcp", "1 MiB")],
                         ["1000.0", "1500.0", "1200.0", "Chorus by 1.20x"])
        self.assertIn("Rounds: Chorus 3, Open MPI 3, Gloo 3.", result.stdout)
        self.assertIn("Chorus wins 1 of the 2 cells it shares with another library, loses 1 "
                      "(to MPI 1, to Gloo 0), ties 0.", result.stdout)

    def test_the_limits_block_comes_from_the_chorus_file(self):
        self.write_three_rounds()
        result = self.side_by_side()
        self.assertEqual(result.returncode, 0, result.stderr)
        head = result.stdout[:result.stdout.index("| ranks |")]
        self.assertIn("| memcpy, 1 core | 18.50 GB/s |", head)
        self.assertIn("| loopback TCP 8 B round trip, busy polling | 7.3 us |", head)
        self.assertIn("| cache-line handoff, one way | 65 ns |", head)
        self.assertIn("r0-chorus.json", head)

    def test_shm_has_no_gloo_and_a_missing_round_is_marked(self):
        self.write("chorus-a.json", report(run("chorus", "auto", "shm", 8, [(64, 3.0)])))
        self.write("chorus-b.json", report(run("chorus", "auto", "shm", 8, [(64, 5.0)])))
        self.write("mpi-a.json", report(run("openmpi", "default", "shm", 8, [(64, 12.0)])))
        result = self.side_by_side()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.table(result.stdout)[(8, "shm", "64 B")],
                         ["4.00", "12.00", "-", "Chorus by 3.00x"])
        self.assertIn("Machine limits: not measured", result.stdout)

    def test_wrong_rows_are_left_out_and_ratios_above_ten_are_whole(self):
        self.write("chorus.json", report(run("chorus", "auto", "tcp", 4, [(4, 100.0), (16, 5.0)])))
        self.write("gloo.json", report(
            run("gloo", "bcube", "tcp", 4, [(4, 1.0, 3), (16, 80.0)]),
            run("gloo", "ring", "tcp", 4, [(4, 5.0), (16, 90.0)])))
        result = self.side_by_side()
        self.assertEqual(result.returncode, 0, result.stderr)
        cells = self.table(result.stdout)
        self.assertEqual(cells[(4, "tcp", "4 B")], ["100.0", "-", "5.00", "Gloo by 20x"])
        self.assertEqual(cells[(4, "tcp", "16 B")], ["5.00", "-", "80.00", "Chorus by 16x"])
        self.assertIn("Left out for wrong elements:", result.stdout)
        self.assertIn("Gloo 4 ranks tcp 4 B", result.stdout)

    def test_markdown_out_and_collective_choice(self):
        self.write_three_rounds()
        self.write("barrier.json", report(run("chorus", "auto", "tcp", 2, [(0, 30.0)],
                                              collective="barrier")))
        result = self.side_by_side()
        self.assertEqual(result.returncode, 1)
        self.assertIn("the files measure allreduce, barrier; choose one with --coll",
                      result.stderr)
        out = os.path.join(self.scratch, "table.md")
        result = self.side_by_side("--coll", "allreduce", "--markdown-out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), result.stdout)

    def test_a_file_of_another_schema_is_refused(self):
        self.write("other.json", {"schema": "nccl-tests/9", "runs": []})
        result = self.side_by_side()
        self.assertEqual(result.returncode, 1)
        self.assertIn("is not a chorus-bench/1 report", result.stderr)


if __name__ == "__main__":
    unittest.main()
