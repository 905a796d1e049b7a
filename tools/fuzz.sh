#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 (libFuzzer, ASan, UBSan, leak
# detection) and runs each for a bounded time: tools/fuzz.sh [seconds-per-target, default 30].
# Prints "fuzz <target>: PASSED|FAILED ..." per target (tools/test.sh counts these lines) and
# exits non-zero if any target crashed, leaked, tripped a sanitizer or failed to build; the
# input that did it is named and kept. See docs/fuzzing.md.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
targets=(handshake_fuzzer frame_header_fuzzer tcp_store_fuzzer)

fail_all() {
  for target in "${targets[@]}"; do echo "fuzz $target: FAILED ($1)"; done
  exit 1
}

bash tools/install_deps.sh || fail_all "installing packages"

# A Bazel output base of its own: clang instead of gcc, and sanitizer flags on every library,
# would otherwise replace the gcc outputs of the normal build, which would then be rebuilt
# from scratch. Keyed by the checkout's path, as Bazel's own default is. The server exits
# after a minute idle, so no second JVM lingers on the machine.
checkout_key=$(pwd | md5sum | cut -c1-16)
output_base="$HOME/.cache/chorus-fuzz-bazel/$checkout_key"
fuzz_bazel() {
  CC=clang-14 bazel --output_base="$output_base" --max_idle_secs=60 "$@" --config=fuzz
}
# Crash, leak and timeout inputs and the logs are kept here.
artifacts="${CHORUS_FUZZ_ARTIFACTS:-/tmp/chorus-fuzz/$checkout_key}"
mkdir -p "$artifacts"

build_start=$(date +%s)
# --symlink_prefix=/: no bazel-bin/bazel-testlogs links, which belong to the gcc build. The
# log stays out of sight unless the build fails: gold warns about hundreds of ASan symbols.
fuzz_bazel build --curses=no --color=no --symlink_prefix=/ "${targets[@]/#/\/\/tests/fuzz:}" \
  >"$artifacts/build.log" 2>&1 || { grep -v "Cannot export local symbol" "$artifacts/build.log" |
  tail -n 40; fail_all "build, log: $artifacts/build.log"; }
echo "[fuzz] built in $(($(date +%s) - build_start)) s"
binaries="$(fuzz_bazel info bazel-bin 2>/dev/null)/tests/fuzz"

# New corpus entries go to a scratch directory so a run never changes the checked-in seeds.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  log="$artifacts/$target.log"
  "$binaries/$target" -max_total_time="$seconds" -timeout=10 -detect_leaks=1 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$target-" \
    "$scratch/$target" "tests/fuzz/corpus/$target" >"$log" 2>&1
  status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  if [ "$status" -eq 0 ]; then
    echo "fuzz $target: PASSED (${runs:-?} runs in ${seconds} s, ${rate:-?} exec/s)"
  else
    failed=1
    crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    tail -n 40 "$log"
    echo "fuzz $target: FAILED (exit $status; input: ${crash:-none written}; log: $log)"
  fi
done
exit "$failed"
