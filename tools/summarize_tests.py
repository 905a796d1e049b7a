#!/usr/bin/env python3
"""Prints "N passed, N failed" for a `bazel test` run, counting Catch2 test cases.

Usage:
  summarize_tests.py counts LABEL BAZEL_LOG BAZEL_STATUS   -> "LABEL passed failed skipped"
  summarize_tests.py fuzz LABEL FUZZ_LOG FUZZ_STATUS       -> "LABEL passed failed 0"
  summarize_tests.py total COUNTS_FILE...                  -> "N passed, N failed[, N skipped]"

Reads the `bazel test --test_summary=short` output (BAZEL_LOG) for each target's result, then
that target's test.log files under bazel-testlogs (one per shard) for Catch2's own totals. A
target whose logs carry no Catch2 totals (it crashed, timed out or is not a Catch2 binary)
counts as one test case with the target's result. A non-zero status with no failure counted
(the build failed) counts as one failure. FUZZ_LOG is tools/fuzz.sh's output: each fuzz target
counts once, with its "fuzz <target>: PASSED|FAILED" line. `counts` must run right after its
`bazel test`: bazel-testlogs points at the configuration (asan, tsan, ...) run last.
"""
import glob
import os
import re
import sys

RESULT = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|NO STATUS|INCOMPLETE|"
                    r"FLAKY|SKIPPED|FAILED TO BUILD)\b")
ALL_PASSED = re.compile(r"All tests passed \(\d+ assertions? in (\d+) test cases?\)")
SOME_FAILED = re.compile(r"test cases:\s+(\d+)\s+\|\s+(\d+) passed\s+\|\s+(\d+) failed")
FUZZ_RESULT = re.compile(r"^fuzz \S+: (PASSED|FAILED)\b")


def catch2_totals(target):
    """(passed, failed) from every shard's log of `target`, or None without Catch2 totals."""
    package, name = target[2:].split(":")
    root = os.path.join("bazel-testlogs", package, name)
    logs = glob.glob(os.path.join(root, "test.log")) + glob.glob(
        os.path.join(root, "shard_*", "test.log"))
    passed = failed = 0
    found = False
    for log in logs:
        with open(log, errors="replace") as handle:
            text = handle.read()
        for match in ALL_PASSED.finditer(text):
            passed += int(match.group(1))
            found = True
        for match in SOME_FAILED.finditer(text):
            passed += int(match.group(2))
            failed += int(match.group(3))
            found = True
    return (passed, failed) if found else None


def bazel_counts(log_path):
    """(passed, failed, skipped) Catch2 test cases of the targets in a `bazel test` log."""
    passed = failed = skipped = 0
    with open(log_path, errors="replace") as handle:
        for line in handle:
            match = RESULT.match(line)
            if not match:
                continue
            target, result = match.groups()
            if result == "SKIPPED":
                skipped += 1
                continue
            # FLAKY: failed, then passed on a retry that bazel allowed (flaky = True); its
            # test.log is the passing attempt's.
            succeeded = result in ("PASSED", "FLAKY")
            totals = catch2_totals(target) if result in ("PASSED", "FAILED", "FLAKY") else None
            if totals and succeeded:
                passed += totals[0]
            elif totals:
                passed += totals[0]
                failed += max(totals[1], 1)
            elif succeeded:
                passed += 1
            else:
                failed += 1
    return passed, failed, skipped


def fuzz_counts(log_path):
    """(passed, failed) fuzz targets in a tools/fuzz.sh log."""
    with open(log_path, errors="replace") as handle:
        results = [match.group(1) for match in map(FUZZ_RESULT.match, handle) if match]
    return results.count("PASSED"), results.count("FAILED")


def failures_given_status(status, failed):
    """A run that exited non-zero without a failure counted (a build error) fails once."""
    return max(failed, 1) if status != "0" else failed


def write_counts(label, passed, failed, skipped):
    print(f"{label} {passed} {failed} {skipped}")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "counts":
        label, log, status = sys.argv[2:5]
        passed, failed, skipped = bazel_counts(log)
        write_counts(label, passed, failures_given_status(status, failed), skipped)
        return 0
    if mode == "fuzz":
        label, log, status = sys.argv[2:5]
        passed, failed = fuzz_counts(log)
        write_counts(label, passed, failures_given_status(status, failed), 0)
        return 0
    if mode == "total":
        passed = failed = skipped = 0
        for path in sys.argv[2:]:
            with open(path) as handle:
                fields = handle.read().split()
            if len(fields) != 4:  # the run left no counts behind: count it as one failure
                failed += 1
                continue
            passed += int(fields[1])
            failed += int(fields[2])
            skipped += int(fields[3])
        print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
        return 0 if failed == 0 else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
