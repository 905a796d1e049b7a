#!/usr/bin/env bash
# The verbs transport on real RDMA devices, in one boot of a throw-away QEMU guest with two
# Soft-RoCE devices (tools/rxe_vm.sh; docs/transport-ibverbs.md, "Testing"):
#   1. the transport conformance suite over verbs (ranks as threads and as processes),
#   2. tests/ibverbs:verbs_device_test: the collectives matrix over verbs at 2, 3 and 4 processes
#      (every collective and algorithm), the registration cache under free-and-reuse, a rank
#      whose registrations fail (locked-memory limit), a slow receiver, a peer SIGKILLed
#      mid-transfer (a process of this host, and one in its own pid namespace as a peer on
#      another host looks), and device / GID / MTU / slot errors,
#   3. one chorus_bench allreduce sweep over verbs, and a 64 MiB allreduce (8 MiB under TCG
#      emulation, where it measures the emulator and takes minutes) beside
#      `ib_write_bw -x 1` (one direction and both) between the same two devices.
# Builds on the host first; the guest runs the host's binaries from its read-only root.
# Exit status: the tests' (0 when all passed). 254/255: the guest could not set up Soft-RoCE or
# died; tools/test.sh reports the verbs tests as skipped then, with the reason.
# `--guest` is the part that runs inside the guest.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != "--guest" ]; then
  bazel build --curses=no --color=no //tests/transport:conformance_test \
    //tests/ibverbs:verbs_device_test //benchmarks:chorus_bench ||
    { echo "=== verbs check: FAILED (build)"; exit 1; }
  # The guest has no bazel: it runs the binaries bazel-bin points at.
  RXE_MEM=${RXE_MEM:-2048} RXE_TIMEOUT=${RXE_TIMEOUT:-1200} exec bash tools/rxe_vm.sh \
    bash tools/verbs_check.sh --guest
fi

# Soft-RoCE hands every packet to the receiving veth's backlog, and its retransmission does not
# recover a packet dropped there (a transfer then stalls until the liveness backstop fails the
# connection): give the backlog room for every packet the tests put in flight.
sysctl -qw net.core.netdev_max_backlog=262144
export CHORUS_TEST_IB_DEVICES=rxe0,rxe1
export CHORUS_LOG=${CHORUS_LOG:-warn}
# The guest's two emulated CPUs carry up to four ranks and the kernel's Soft-RoCE work: waiters
# that poll would take the CPU from what they wait for.
export CHORUS_SPIN_US=0
export TMPDIR=/tmp
status=0
run() {
  echo "=== $*"
  local started=$SECONDS
  "$@"
  local code=$?
  echo "=== exit $code: $1 ($((SECONDS - started)) s)"
  [ $code -eq 0 ] || status=1
}

# The collectives matrix moves the most data through the emulated devices, where a queue pair
# can stall for good (rarely, and only in its multi-MiB cases so far; docs/transport-ibverbs.md,
# "Testing"): when it fails, its failures are shown, it runs once more, and a pass then is
# reported FLAKY, never silently. Only the rerun's totals are counted.
matrix_with_one_rerun() {
  local first=/tmp/verbs_matrix_first.log
  echo "=== verbs_device_test [matrix]"
  local started=$SECONDS
  bazel-bin/tests/ibverbs/verbs_device_test "[matrix]" >"$first" 2>&1
  local code=$?
  if [ $code -ne 0 ]; then
    echo "=== exit $code: the collectives matrix failed once; its failures (not counted):"
    # The ranks' first warnings name the cause (the connection that broke, and why).
    { grep "^\[chorus [WE]" "$first" | head -20
      grep -v -E "test cases:|All tests passed" "$first" | grep -B8 -A14 "FAILED:"; } |
      sed 's/^/  | /'
    echo "=== verbs_device_test [matrix], its one rerun"
    started=$SECONDS
    bazel-bin/tests/ibverbs/verbs_device_test "[matrix]" >"$first" 2>&1
    code=$?
    [ $code -eq 0 ] && echo "=== FLAKY: the collectives matrix over verbs failed once, then" \
      "passed on its one rerun (its first failures are above)"
  fi
  cat "$first"
  echo "=== exit $code: verbs_device_test [matrix] ($((SECONDS - started)) s)"
  [ $code -eq 0 ] || status=1
}

run env CHORUS_TEST_TRANSPORTS=ibverbs bazel-bin/tests/transport/conformance_test
run bazel-bin/tests/ibverbs/verbs_device_test "~[matrix]"
matrix_with_one_rerun

echo "=== chorus_bench allreduce over verbs, 2 ranks (rxe0 <-> rxe1)"
bench() {
  python3 integrations/launcher/chorusrun.py -n 2 --store file --timeout 600 -- \
    env CHORUS_IB_DEVICE=rxe0,rxe1 bazel-bin/benchmarks/chorus_bench --transport ibverbs \
    --limits 0 -d float32 -o sum "$@"
}
run bench -b 8 -e 4M -f 4 -n 5 -w 2
large=64M
grep -q "QEMU TCG" /proc/cpuinfo && large=8M
echo "=== $large allreduce over verbs beside ib_write_bw -x 1 (rxe0 <-> rxe1)," \
  "$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2-)"
run bench -b $large -e $large -n 3 -w 1
# One direction, then both at once (-b: perftest reports the two directions' sum). A 2-rank
# allreduce loads both directions with busbw each, so busbw sits against half the -b figure.
write_bw() {
  ib_write_bw -d rxe0 -x 1 -s 1048576 -n 200 -F "$@" >/tmp/ib_server.log 2>&1 &
  local server=$!
  sleep 1
  ib_write_bw -d rxe1 -x 1 -s 1048576 -n 200 -F "$@" 10.11.0.1 2>&1 | tail -4
  wait $server
}
echo "--- ib_write_bw -x 1, one direction"
write_bw
echo "--- ib_write_bw -x 1 -b, both directions"
write_bw -b
echo "=== verbs check: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
