#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test, and ends with the line
# "N passed, N failed" counting Catch2 test cases. Extra arguments go to `bazel test`
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

echo
# Counts Catch2 test cases per target from the logs (see tools/summarize_tests.py).
python3 tools/summarize_tests.py "$log" "$status"
summary=$?
[ "$status" -eq 0 ] && [ "$summary" -eq 0 ]
