#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test, and ends with the line
# "N passed, N failed" counting Catch2 test cases and, for the whole suite, one case per fuzz
# target run by tools/fuzz.sh for 30 s. Extra arguments go to `bazel test` and skip the fuzzing
# (e.g. tools/test.sh --config=asan //tests/transport/...).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

targets=("$@")
whole_suite=false
[ ${#targets[@]} -eq 0 ] && targets=(//...) && whole_suite=true

log=$(mktemp)
fuzz_log=$(mktemp)
trap 'rm -f "$log" "$fuzz_log"' EXIT
# --test_summary=short lists every test target with its result, which the summary counts.
bazel test --curses=no --color=no --show_progress_rate_limit=30 --test_summary=short \
  "${targets[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

fuzz_status=0
if $whole_suite; then
  echo
  bash tools/fuzz.sh 30 2>&1 | tee "$fuzz_log"
  fuzz_status=${PIPESTATUS[0]}
fi

echo
# Counts Catch2 test cases per target from the logs (see tools/summarize_tests.py).
python3 tools/summarize_tests.py "$log" "$status" "$fuzz_log" "$fuzz_status"
summary=$?
[ "$status" -eq 0 ] && [ "$fuzz_status" -eq 0 ] && [ "$summary" -eq 0 ]
