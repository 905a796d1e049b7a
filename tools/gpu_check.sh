#!/usr/bin/env bash
# The GPU check: builds the CUDA test suite and the GPU benchmark with --config=cuda, then, on a
# machine with a GPU, runs both and prints one summary; without a GPU it says SKIPPED and why.
#
#   bash tools/gpu_check.sh                 build here; run here if there is a GPU
#   bash tools/gpu_check.sh --bundle DIR    build here into DIR (binaries and the shared
#                                           libraries they need that a bare GPU machine lacks)
#   bash tools/gpu_check.sh --run DIR       run a bundle (on a GPU machine without Bazel)
#
# Ends with "N passed, N failed[, N skipped]": the test cases of cuda_device_test, plus one for
# the benchmark run.
set -uo pipefail
cd "$(dirname "$0")/.."

build_bundle() {
  local dir=$1
  mkdir -p "$dir/lib"
  # chorus_bench without CUDA support too: the cost of asking where host buffers live.
  bazel build --dynamic_mode=off //benchmarks:chorus_bench || return 1
  cp -f bazel-bin/benchmarks/chorus_bench "$dir/chorus_bench_host_only"
  bazel build --config=cuda --dynamic_mode=off //tests/cuda:cuda_device_test \
    //tests/cuda:public_api_cuda_test //benchmarks/cuda:gpu_bench //benchmarks:chorus_bench ||
    return 1
  cp -f bazel-bin/tests/cuda/cuda_device_test bazel-bin/tests/cuda/public_api_cuda_test \
    bazel-bin/benchmarks/cuda/gpu_bench bazel-bin/benchmarks/chorus_bench "$dir/"
  # The public-API test runs on libchorus.so (with CUDA support) and the shared cudart.
  cp -fL bazel-bin/tests/cuda/libchorus.so.0 /usr/local/cuda/lib64/libcudart.so.13 "$dir/lib/"
  cp -f integrations/launcher/chorusrun.py "$dir/chorusrun"  # one file, the standard library
  # Abseil and hiredis are Debian's shared builds; GPU machines rarely have those versions.
  ldd "$dir"/* 2>/dev/null | awk '/libabsl_|libhiredis/ {print $3}' | sort -u |
    xargs -r cp -fL -t "$dir/lib/"
  # Without debug information the bundle is a third of the size (lent machines take little).
  chmod u+w "$dir"/* "$dir"/lib/*
  strip --strip-debug "$dir"/cuda_device_test "$dir"/public_api_cuda_test "$dir"/gpu_bench \
    "$dir"/chorus_bench "$dir"/chorus_bench_host_only "$dir"/lib/libchorus.so.0
}

run_bundle() {
  local dir=$1
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local log
  log=$(mktemp)
  echo "=== cuda_device_test"
  # The processes case first, alone: its parent must not touch CUDA before it forks.
  "$dir/cuda_device_test" "[processes]" 2>&1 | tee "$log"
  local status_a=${PIPESTATUS[0]}
  "$dir/cuda_device_test" "~[processes]" 2>&1 | tee -a "$log"
  local status_b=${PIPESTATUS[0]}
  echo "=== public_api_cuda_test" | tee -a "$log"
  "$dir/public_api_cuda_test" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status_b=1
  echo "=== gpu_bench" | tee -a "$log"
  "$dir/gpu_bench" 2>&1 | tee -a "$log"
  local status_c=${PIPESTATUS[0]}
  if [ -e /dev/nvidiactl ]; then
    # The same allreduce sweep with device and host buffers, 2 ranks over shared memory, and
    # host buffers with a library that has no CUDA support (nothing asks where they live).
    local sweep=(--transport shm -b 8 -e 256M -f 8 -n 20 -w 3)
    # Device buffers: cuda_ipc from CHORUS_CUDA_IPC_MIN_BYTES up (the default); all staged (in
    # segments above CHORUS_CUDA_STAGING_SEGMENT_BYTES, the default); and all staged whole.
    for setting in "CHORUS_CUDA_IPC=1" "CHORUS_CUDA_IPC=0" \
      "CHORUS_CUDA_IPC=0 CHORUS_CUDA_STAGING_SEGMENT_BYTES=0"; do
      echo "=== chorus_bench --buffers cuda, $setting" | tee -a "$log"
      # shellcheck disable=SC2086 # the setting is one or two words for env
      env $setting python3 "$dir/chorusrun" -n 2 "$dir/chorus_bench" "${sweep[@]}" \
        --buffers cuda 2>&1 | grep -v "^\[rank 1\]" | tee -a "$log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status_c=1
    done
    echo "=== chorus_bench --buffers heap" | tee -a "$log"
    python3 "$dir/chorusrun" -n 2 "$dir/chorus_bench" "${sweep[@]}" --buffers heap 2>&1 |
      grep -v "^\[rank 1\]" | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status_c=1
    echo "=== chorus_bench (no CUDA support) --buffers heap" | tee -a "$log"
    python3 "$dir/chorusrun" -n 2 "$dir/chorus_bench_host_only" "${sweep[@]}" 2>&1 |
      grep -v "^\[rank 1\]" | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status_c=1
  fi
  echo
  python3 - "$log" "$status_a" "$status_b" "$status_c" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
statuses = [int(s) for s in sys.argv[2:]]
passed = failed = 0
for m in re.finditer(r"All tests passed \(\d+ assertions? in (\d+) test cases?\)", text):
    passed += int(m.group(1))
for m in re.finditer(r"test cases:\s+(\d+)\s+\|\s+(\d+) passed\s+\|\s+(\d+) failed", text):
    passed += int(m.group(2)); failed += int(m.group(3))
for m in re.finditer(r"test cases:\s+(\d+)\s+\|\s+(\d+) passed\s*$", text, re.M):
    passed += int(m.group(2))
skipped = len(re.findall(r"^\s*SKIPPED: ", text, re.M))
passed -= min(passed, skipped)
bench = text.split("=== gpu_bench", 1)[-1]
bench_ok = statuses[2] == 0 and not re.search(r"^allreduce \(.*\) failed", bench, re.M)
if not re.search(r"^\s*SKIPPED: ", bench, re.M):
    passed += bench_ok
    failed += not bench_ok
if (statuses[0] or statuses[1]) and failed == 0:
    failed = 1
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
PY
}

case "${1:-}" in
  --bundle) build_bundle "$2" ;;
  --run) run_bundle "$2" ;;
  *)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    build_bundle "$dir" || { echo "0 passed, 1 failed"; exit 1; }
    run_bundle "$dir"
    ;;
esac
