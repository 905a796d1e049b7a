#!/usr/bin/env python3
"""Prints "N passed, N failed" for a `bazel test` run, counting Catch2 test cases.

Usage:
  summarize_tests.py counts LABEL BAZEL_LOG BAZEL_STATUS [FAILURES] -> "LABEL passed failed skipped"
  summarize_tests.py fuzz LABEL FUZZ_LOG FUZZ_STATUS [FAILURES]     -> "LABEL passed failed 0"
  summarize_tests.py log LABEL LOG STATUS [FAILURES]                -> "LABEL passed failed skipped"
  summarize_tests.py total COUNTS_FILE...                 -> "N passed, N failed[, N skipped]"

FAILURES, when given, is a file that receives what failed: each failed target (or fuzz target)
with an excerpt of its log around Catch2's "FAILED:" lines, or the log's last lines when it has
none (a crash, a timeout). The whole suite prints these files again right before its total, so
the end of a long CI log names what failed.

Reads the `bazel test --test_summary=short` output (BAZEL_LOG) for each target's result, then
that target's test.log files under bazel-testlogs (one per shard) for Catch2's or Python
unittest's own totals. A target whose logs carry neither (it crashed, timed out or is another
kind of test) counts as one test case with the target's result.

A test that cannot run here (no GPU, no network namespaces, ...) prints a line
"SKIPPED: <why>" (Catch2: WARN("SKIPPED: ...")) and returns without failing; each such line
moves one of its target's passed cases to skipped, and `counts` prints the lines to stderr, so
a skip is reported with its reason and never counted as a pass. unittest's own skips
("OK (skipped=N)") count as skipped too. A non-zero status with no failure counted
(the build failed) counts as one failure. FUZZ_LOG is tools/fuzz.sh's output: each fuzz target
counts once, with its "fuzz <target>: PASSED|FAILED" line. `log` counts the Catch2 totals
and skip lines of test binaries run directly into one LOG (tools/verbs_check.sh in its guest). `counts` must run right after its
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
# Catch2's totals when every case passed but none made an assertion (each skipped, say).
ALL_PASSED_NO_ASSERTIONS = re.compile(r"^test cases:\s+(\d+)\s+\|\s+(\d+) passed\s*$", re.M)
FUZZ_RESULT = re.compile(r"^fuzz \S+: (PASSED|FAILED)\b")
UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
UNITTEST_SKIPPED = re.compile(r"^(?:OK|FAILED) \(.*?skipped=(\d+)", re.MULTILINE)
UNITTEST_FAILED = re.compile(r"^FAILED \((?:failures=(\d+))?(?:, )?(?:errors=(\d+))?",
                             re.MULTILINE)
SKIP_LINE = re.compile(r"^\s*SKIPPED: (.*)$", re.MULTILINE)
# Catch2's failed assertion or fatal signal, and the sanitizers' reports.
FAILURE_MARKER = re.compile(r"(?:FAILED:|FATAL ERROR|ERROR: AddressSanitizer|"
                            r"WARNING: ThreadSanitizer|runtime error:)")
# How much of a failed log the excerpt keeps: lines before and after each failure marker, and
# the most lines per log.
EXCERPT_BEFORE = 8
EXCERPT_AFTER = 10
EXCERPT_MOST = 60


def target_logs(target):
    """The text of every shard's test.log of `target`."""
    package, name = target[2:].split(":")
    root = os.path.join("bazel-testlogs", package, name)
    logs = glob.glob(os.path.join(root, "test.log")) + glob.glob(
        os.path.join(root, "shard_*", "test.log"))
    texts = []
    for log in logs:
        with open(log, errors="replace") as handle:
            texts.append(handle.read())
    return texts


def case_totals(texts):
    """(passed, failed, skipped) from Catch2's or unittest's totals, or None without any."""
    passed = failed = skipped = 0
    found = False
    for text in texts:
        for match in ALL_PASSED.finditer(text):
            passed += int(match.group(1))
            found = True
        for match in SOME_FAILED.finditer(text):
            passed += int(match.group(2))
            failed += int(match.group(3))
            found = True
        for match in ALL_PASSED_NO_ASSERTIONS.finditer(text):
            passed += int(match.group(2))
            found = True
        for match in UNITTEST_RAN.finditer(text):
            passed += int(match.group(1))
            found = True
        for match in UNITTEST_SKIPPED.finditer(text):
            passed -= int(match.group(1))
            skipped += int(match.group(1))
        for match in UNITTEST_FAILED.finditer(text):
            broken = sum(int(group or 0) for group in match.groups())
            passed -= broken
            failed += broken
    return (passed, failed, skipped) if found else None


def skip_reasons(target, texts):
    """The "SKIPPED: <why>" lines of a target's logs, each prefixed with the target."""
    return ["%s: %s" % (target, match.group(1).strip()) for text in texts
            for match in SKIP_LINE.finditer(text)]


def failure_excerpt(text):
    """The lines of a failed log around its failure markers, or its last lines without any."""
    lines = text.splitlines()
    keep = set()
    for index, line in enumerate(lines):
        if FAILURE_MARKER.search(line):
            keep.update(range(max(0, index - EXCERPT_BEFORE),
                              min(len(lines), index + EXCERPT_AFTER + 1)))
    chosen = sorted(keep)[:EXCERPT_MOST] if keep else range(
        max(0, len(lines) - EXCERPT_MOST // 2), len(lines))
    excerpt, previous = [], None
    for index in chosen:
        if previous is not None and index != previous + 1:
            excerpt.append("  | ...")
        excerpt.append("  | " + lines[index])
        previous = index
    return excerpt


def failure_report(label, target, result, texts):
    """Lines naming a failed target of run `label`, each of its logs excerpted."""
    report = ["FAILED in %s: %s (%s)" % (label, target, result)]
    for text in texts:
        report += failure_excerpt(text)
    return report


def bazel_counts(log_path, label="run"):
    """(passed, failed, skipped, reasons, failures) test cases of the targets in a `bazel test`
    log; failures holds the report lines of each failed target."""
    passed = failed = skipped = 0
    reasons = []
    failures = []
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
            logs = target_logs(target)
            # A timed-out or incomplete target's log carries no totals to count.
            texts = logs if result in ("PASSED", "FAILED", "FLAKY") else []
            if not succeeded:
                failures += failure_report(label, target, result, logs)
            totals = case_totals(texts)
            if totals is None:
                totals = (1, 0, 0) if succeeded else (0, 1, 0)
            target_passed, target_failed, target_skipped = totals
            if not succeeded:
                target_failed = max(target_failed, 1)
            # unittest skips are counted from its totals; the marker lines move Catch2 passes.
            marked = skip_reasons(target, texts)
            moved = min(len(marked), target_passed) if target_skipped == 0 else 0
            passed += target_passed - moved
            failed += target_failed
            skipped += target_skipped + moved
            reasons += marked
    return passed, failed, skipped, reasons, failures


def fuzz_counts(log_path):
    """(passed, failed, failures) fuzz targets in a tools/fuzz.sh log; failures holds the
    result line of each failed target."""
    with open(log_path, errors="replace") as handle:
        lines = handle.read().splitlines()
    results = [(match.group(1), line) for line, match in
               ((line, FUZZ_RESULT.match(line)) for line in lines) if match]
    failures = [line for result, line in results if result == "FAILED"]
    return len(results) - len(failures), len(failures), failures


def failures_given_status(status, failed):
    """A run that exited non-zero without a failure counted (a build error) fails once."""
    return max(failed, 1) if status != "0" else failed


def write_counts(label, passed, failed, skipped):
    print(f"{label} {passed} {failed} {skipped}")


def write_failures(arguments, lines):
    """Writes the report lines to the optional FAILURES file named in `arguments`."""
    if arguments:
        with open(arguments[0], "w") as handle:
            handle.write("".join(line + "\n" for line in lines))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "counts":
        label, log, status = sys.argv[2:5]
        passed, failed, skipped, reasons, failures = bazel_counts(log, label)
        for reason in reasons:
            print("skipped: " + reason, file=sys.stderr)
        failed = failures_given_status(status, failed)
        if failed and not failures:
            failures = ["FAILED in %s: bazel exited %s (a build error?); its log is above" %
                        (label, status)]
        write_counts(label, passed, failed, skipped)
        write_failures(sys.argv[5:], failures)
        return 0
    if mode == "fuzz":
        label, log, status = sys.argv[2:5]
        passed, failed, failures = fuzz_counts(log)
        write_counts(label, passed, failures_given_status(status, failed), 0)
        write_failures(sys.argv[5:], ["FAILED in %s: %s" % (label, line) for line in failures])
        return 0
    if mode == "log":
        label, log, status = sys.argv[2:5]
        with open(log, errors="replace") as handle:
            text = handle.read()
        passed, failed, skipped = case_totals([text]) or (0, 0, 0)
        reasons = skip_reasons(label, [text])
        moved = min(len(reasons), passed)
        for reason in reasons:
            print("skipped: " + reason, file=sys.stderr)
        failed = failures_given_status(status, failed)
        write_counts(label, passed - moved, failed, skipped + moved)
        write_failures(sys.argv[5:], failure_report(label, "its log", "exit %s" % status, [text])
                       if failed else [])
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
