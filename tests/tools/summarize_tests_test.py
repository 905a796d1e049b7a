"""tools/summarize_tests.py on made-up `bazel test` output: Catch2 and unittest totals, failures,
and tests that report themselves skipped ("SKIPPED: <why>"), which must never count as passed."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "summarize_tests.py")

CATCH2_PASSED = "All tests passed (12 assertions in 4 test cases)\n"
CATCH2_WITH_SKIP = ("warning:\n  SKIPPED: cannot create network namespaces (needs root)\n"
                    "All tests passed (3 assertions in 2 test cases)\n")
CATCH2_FAILED = "test cases: 5 | 3 passed | 2 failed\n"
# Every case skipped: Catch2 then counts no assertions and prints its other totals line.
CATCH2_ALL_SKIPPED = ("  SKIPPED: no GPU\n  SKIPPED: no GPU\n  SKIPPED: no GPU\n"
                      "test cases: 3 | 3 passed\nassertions: - none -\n")
UNITTEST_SKIPPED = ("SKIPPED: __main__.A.test_x: no GPU\nSKIPPED: __main__.A.test_y: no GPU\n"
                    "Ran 3 tests in 0.1s\n\nOK (skipped=2)\n")
UNITTEST_FAILED = "Ran 4 tests in 0.1s\n\nFAILED (failures=1, errors=1)\n"


class Counts(unittest.TestCase):
    def run_counts(self, logs, summary_lines, failures_file=None):
        with tempfile.TemporaryDirectory() as work:
            for target, text in logs.items():
                package, name = target[2:].split(":")
                directory = os.path.join(work, "bazel-testlogs", package, name)
                os.makedirs(directory)
                with open(os.path.join(directory, "test.log"), "w") as handle:
                    handle.write(text)
            bazel_log = os.path.join(work, "bazel.log")
            with open(bazel_log, "w") as handle:
                handle.write("\n".join(summary_lines) + "\n")
            extra = [failures_file] if failures_file else []
            result = subprocess.run(
                [sys.executable, SCRIPT, "counts", "run", bazel_log, "0"] + extra,
                cwd=work, capture_output=True, text=True, check=True)
        return result.stdout.split(), result.stderr

    def test_catch2_and_unittest_totals_with_skips_and_failures(self):
        counts, stderr = self.run_counts(
            {"//a:passes": CATCH2_PASSED, "//a:skips": CATCH2_WITH_SKIP,
             "//a:fails": CATCH2_FAILED, "//b:py_skips": UNITTEST_SKIPPED,
             "//b:py_fails": UNITTEST_FAILED, "//d:gpu": CATCH2_ALL_SKIPPED},
            ["//a:passes PASSED in 1.0s", "//a:skips PASSED in 1.0s",
             "//a:fails FAILED in 1.0s", "//b:py_skips PASSED in 1.0s",
             "//b:py_fails FAILED in 1.0s", "//c:other PASSED in 1.0s",
             "//d:gpu PASSED in 1.0s"])
        # passed: 4 + (2 - 1 skipped) + 3 + (3 - 2 skipped) + (4 - 2 broken) + 1 (no totals)
        # + (3 - 3 skipped)
        self.assertEqual(counts, ["run", "12", "4", "6"])
        self.assertIn("skipped: //a:skips: cannot create network namespaces (needs root)", stderr)
        self.assertIn("skipped: //b:py_skips: __main__.A.test_x: no GPU", stderr)

    def test_failed_targets_are_named_with_an_excerpt_of_their_log(self):
        catch2_failure = ("\n".join("setup line %d" % n for n in range(40)) +
                          "\ntests/a/fails.cc:12: FAILED:\n  REQUIRE( sum == 6 )\n"
                          "with expansion:\n  5 == 6\n" + CATCH2_FAILED)
        crash = "\n".join("output line %d" % n for n in range(100)) + "\nSegmentation fault\n"
        with tempfile.TemporaryDirectory() as scratch:
            failures = os.path.join(scratch, "run.failures")
            self.run_counts({"//a:passes": CATCH2_PASSED, "//a:fails": catch2_failure,
                             "//a:crashes": crash},
                            ["//a:passes PASSED in 1.0s", "//a:fails FAILED in 1.0s",
                             "//a:crashes TIMEOUT in 300.0s"], failures)
            with open(failures) as handle:
                report = handle.read()
        self.assertIn("FAILED in run: //a:fails (FAILED)", report)
        self.assertIn("  | tests/a/fails.cc:12: FAILED:", report)
        self.assertIn("  |   5 == 6", report)
        # Only the lines near the failure, not the whole log.
        self.assertNotIn("setup line 3\n", report)
        self.assertIn("FAILED in run: //a:crashes (TIMEOUT)", report)
        self.assertIn("  | Segmentation fault", report)
        self.assertNotIn("output line 5\n", report)
        self.assertNotIn("//a:passes", report)

    def run_log(self, text, status):
        with tempfile.TemporaryDirectory() as work:
            log = os.path.join(work, "guest.log")
            with open(log, "w") as handle:
                handle.write(text)
            result = subprocess.run([sys.executable, SCRIPT, "log", "verbs", log, status],
                                    capture_output=True, text=True, check=True)
        return result.stdout.split(), result.stderr

    def test_binaries_run_into_one_log(self):
        # Two test binaries and a benchmark in one guest log, one skip line among them.
        counts, stderr = self.run_log(
            "=== conformance\n" + CATCH2_PASSED + "=== device\n" + CATCH2_WITH_SKIP +
            CATCH2_FAILED + "=== bench\n# wrong 0\n", "1")
        self.assertEqual(counts, ["verbs", "8", "2", "1"])
        self.assertIn("skipped: verbs: cannot create network namespaces (needs root)", stderr)
        # A run that failed without a failed case (a benchmark, a crash) still fails once.
        self.assertEqual(self.run_log(CATCH2_PASSED, "1")[0], ["verbs", "4", "1", "0"])
        self.assertEqual(self.run_log(CATCH2_PASSED, "0")[0], ["verbs", "4", "0", "0"])

    def test_totals_add_up_and_name_skips(self):
        with tempfile.TemporaryDirectory() as work:
            paths = []
            for index, line in enumerate(["tests 10 0 2", "asan 5 1 0"]):
                path = os.path.join(work, "%d.counts" % index)
                with open(path, "w") as handle:
                    handle.write(line + "\n")
                paths.append(path)
            result = subprocess.run([sys.executable, SCRIPT, "total"] + paths,
                                    capture_output=True, text=True)
        self.assertEqual(result.stdout.strip(), "15 passed, 1 failed, 2 skipped")
        self.assertEqual(result.returncode, 1)


if __name__ == "__main__":
    unittest.main()
