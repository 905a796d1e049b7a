#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test, then (whole suite
# only) the CUDA targets built with --config=cuda (they compile and link here; the GPU tests
# say SKIPPED without a GPU, docs/cuda.md), the verbs tests on Soft-RoCE in a QEMU guest
# (tools/verbs_check.sh; skipped, saying why, when the guest cannot run), the transport, shared-memory, CUDA-staging,
# collectives and reliability suites again under
# AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer, and each fuzz target
# for 30 s (tools/fuzz.sh). Ends with what failed (each failed target with an excerpt of its
# log), each run's counts, and the line "N passed, N failed" counting Catch2 test cases
# of every run and one case per fuzz target. Extra arguments go to `bazel test` and skip the
# sanitizer and fuzz runs (e.g. tools/test.sh --config=asan //tests/transport/...).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

targets=("$@")
whole_suite=false
[ ${#targets[@]} -eq 0 ] && targets=(//...) && whole_suite=true
# What the sanitizer runs cover: everything that moves bytes between threads and processes.
# (The benchmark and launcher tests drive the same code through separate programs.)
sanitized=(//tests/core/... //tests/security/... //tests/rendezvous/... //tests/transport/...
  //tests/shm/... //tests/cuda/... //tests/ibverbs/...
  //tests/collectives/... //tests/harness/... //tests/reliability/...)

# Bazel 4 keeps the _virtual_includes symlink of a header after the header moves to another
# target, and a stale one fails the next build with "undeclared inclusion". Dropping them all
# is safe and cheap: Bazel recreates those still declared.
if output_path=$(bazel info output_path 2>/dev/null); then
  find "$output_path" -maxdepth 8 -type d -name _virtual_includes -prune -exec rm -rf {} +
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs `bazel test` with the given arguments and records its counts as $work/<label>.counts.
# Each run is summarised right away: bazel-testlogs points at the last configuration run.
run_suite() {
  local label=$1
  shift
  echo
  echo "=== $label: bazel test $*"
  # --test_summary=short lists every test target with its result, which the summary counts.
  bazel test --curses=no --color=no --show_progress_rate_limit=30 --test_summary=short "$@" \
    2>&1 | tee "$work/$label.log"
  local status=${PIPESTATUS[0]}
  python3 tools/summarize_tests.py counts "$label" "$work/$label.log" "$status" \
    "$work/$label.failures" >"$work/$label.counts"
  cat "$work/$label.counts"
}

run_suite tests "${targets[@]}"
if $whole_suite; then
  # CUDA code compiles and links on every run: a CUDA-only build error fails CI.
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    run_suite cuda --config=cuda //cuda/... //tests/cuda/... //benchmarks/cuda/...
  else
    echo "SKIPPED: no CUDA toolkit at /usr/local/cuda (tools/install_deps.sh says how to get it)"
    echo "cuda 0 0 1" >"$work/cuda.counts"
  fi
  # The verbs transport on two Soft-RoCE devices in one QEMU guest boot (tools/verbs_check.sh).
  bash tools/verbs_check.sh 2>&1 | tee "$work/verbs.log"
  verbs_status=${PIPESTATUS[0]}
  if grep -q "^=== verbs check:" "$work/verbs.log"; then
    python3 tools/summarize_tests.py log verbs "$work/verbs.log" "$verbs_status" \
      "$work/verbs.failures" >"$work/verbs.counts"
    # A pass on a rerun (tools/verbs_check.sh) is named again at the end.
    grep "^=== FLAKY:" "$work/verbs.log" | sed 's/^=== /verbs: /' >"$work/verbs.flaky"
  elif [ "$verbs_status" -eq 254 ] || ! grep -q "booting guest" "$work/verbs.log"; then
    echo "SKIPPED: the verbs tests need the Soft-RoCE guest, which could not start here" \
      "(tools/verbs_check.sh exited $verbs_status; its output is above)"
    echo "verbs 0 0 1" >"$work/verbs.counts"
  else
    echo "FAILED in verbs: the guest died or timed out before the tests finished" \
      "(exit $verbs_status)" | tee "$work/verbs.failures"
    echo "verbs 0 1 0" >"$work/verbs.counts"
  fi
  cat "$work/verbs.counts"
  # The soak's length is not what the sanitizers check; a shorter one keeps CI in budget.
  run_suite asan --config=asan --test_env=CHORUS_SOAK_SECONDS=15 "${sanitized[@]}"
  run_suite tsan --config=tsan --test_env=CHORUS_SOAK_SECONDS=15 "${sanitized[@]}"
  echo
  bash tools/fuzz.sh 30 2>&1 | tee "$work/fuzz.log"
  python3 tools/summarize_tests.py fuzz fuzz "$work/fuzz.log" "${PIPESTATUS[0]}" \
    "$work/fuzz.failures" >"$work/fuzz.counts"
fi

# What failed, and each run's counts, again at the end, where a cut log still shows them.
echo
cat "$work"/*.failures "$work"/*.flaky 2>/dev/null
cat "$work"/*.counts
python3 tools/summarize_tests.py total "$work"/*.counts
