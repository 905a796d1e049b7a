#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test, and ends with the line
# "N passed, N failed" counting test targets. Extra arguments go to `bazel test`
# (e.g. tools/test.sh --config=asan //tests/transport/...).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(//...)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --test_summary=short lists every test target with its result, which the summary counts.
bazel test --curses=no --color=no --show_progress_rate_limit=30 --test_summary=short \
  "${targets[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
skipped=$(grep -cE '^//[^ ]+ +SKIPPED' "$log")
# A build failure fails the run even when no test target reported.
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo
if [ "$skipped" -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
