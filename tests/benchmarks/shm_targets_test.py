"""shm_targets.py's verdicts on hand-made reports: each target met, then missed."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "benchmarks", "shm_targets.py")


def report(rows, memcpy=10.0):
    """rows: (bytes, time_us, busbw); the in-place mode is a little worse than out-of-place."""
    def mode(t, bw):
        return {"time_us": t, "algbw_gbps": bw, "busbw_gbps": bw, "wrong": None}
    return {
        "schema": "chorus-bench/1", "machine": {"online_cores": 2},
        "limits": {"memcpy_gbps": memcpy},
        "runs": [{"collective": "allreduce", "rows": [
            {"bytes": b, "out_of_place": mode(t, bw), "in_place": mode(t * 1.5, bw / 2)}
            for b, t, bw in rows]}],
    }


class ShmTargets(unittest.TestCase):
    def run_script(self, tcp64, shm64, eight_us, oversubscribed_times):
        with tempfile.TemporaryDirectory() as tmp:
            paths = {}
            reports = {
                "tcp": report([(64 << 20, 1, tcp64)]),
                "shm": report([(8, 1, 0), (64 << 20, 1, shm64)]),
                "latency": report([(8, eight_us, 0)]),
                "oversubscribed": report([(4 ** i, t, 0)
                                          for i, t in enumerate(oversubscribed_times, 1)]),
            }
            for name, content in reports.items():
                paths[name] = os.path.join(tmp, name + ".json")
                with open(paths[name], "w") as f:
                    json.dump(content, f)
            out = subprocess.run(
                [sys.executable, SCRIPT] + [a for n in reports for a in (f"--{n}", paths[n])],
                check=True, capture_output=True, text=True).stdout
        return out.splitlines()

    def test_all_met(self):
        lines = self.run_script(tcp64=1.5, shm64=6.5, eight_us=0.9,
                                oversubscribed_times=[10, 11, 15, 20])
        self.assertEqual(len(lines), 4)
        for line in lines:
            self.assertTrue(line.endswith("-> met"), line)
        self.assertIn("6.50 vs 1.50 GB/s = 4.33x", lines[0])
        self.assertIn("65%", lines[1])

    def test_each_missed(self):
        lines = self.run_script(tcp64=1.5, shm64=3.0, eight_us=2.2,
                                oversubscribed_times=[10, 50, 60, 70])
        for line in lines:
            self.assertTrue(line.endswith("-> MISSED"), line)
        self.assertIn("2.00x", lines[0])
        self.assertIn("30%", lines[1])
        self.assertIn("2.20 us", lines[2])
        self.assertIn("4->16 B: time x5.0", lines[3])

    def test_shared_buffers_add_two_lines(self):
        with tempfile.TemporaryDirectory() as tmp:
            names = ("tcp", "shm", "latency", "oversubscribed", "shm-shared")
            contents = [report([(64 << 20, 1, 1.5)]), report([(8, 1, 0), (64 << 20, 1, 4.0)]),
                        report([(8, 0.9, 0)]), report([(4, 10, 0), (16, 11, 0)]),
                        report([(64 << 20, 1, 8.0)], memcpy=10.0)]
            args = []
            for name, content in zip(names, contents):
                path = os.path.join(tmp, name + ".json")
                with open(path, "w") as f:
                    json.dump(content, f)
                args += [f"--{name}", path]
            lines = subprocess.run([sys.executable, SCRIPT] + args, check=True,
                                   capture_output=True, text=True).stdout.splitlines()
        self.assertEqual(len(lines), 6)
        self.assertTrue(lines[1].endswith("40% -> MISSED"), lines[1])
        self.assertIn("shared-memory buffers >= 3x tcp busbw: 8.00 vs 1.50 GB/s", lines[4])
        self.assertTrue(lines[5].endswith("80% -> met"), lines[5])

    def test_missing_row_is_an_error(self):
        with self.assertRaises(subprocess.CalledProcessError):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "r.json")
                with open(path, "w") as f:
                    json.dump(report([(8, 1, 0)]), f)
                subprocess.run([sys.executable, SCRIPT, "--tcp", path, "--shm", path,
                                "--latency", path, "--oversubscribed", path],
                               check=True, capture_output=True)


if __name__ == "__main__":
    unittest.main()
