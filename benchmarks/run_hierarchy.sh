#!/usr/bin/env bash
# Hierarchical against flat allreduce on two simulated hosts: two network namespaces joined by
# veth pairs on a bridge (a namespace of its own), two ranks in each, the hybrid transport
# (`--transport auto`: shm within a namespace, TCP across). Every rank is started with
# `ip netns exec`, listens on its namespace's address and meets the others through a file
# store (rank 0 prints and writes the JSON). One chorus_bench run sweeps the selector's choice and each algorithm it chooses among.
# Needs root and iproute2; removes its namespaces on exit. Writes
# benchmarks/results/chorus-hierarchy-2x2.json.
#
#   bash benchmarks/run_hierarchy.sh      (after bazel build //benchmarks:chorus_bench)
# ITERS / WARMUP / FACTOR override -n / -w / -f; ALGOS the --algo list.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=benchmarks/results
CHORUS=bazel-bin/benchmarks/chorus_bench
ALGOS=${ALGOS:-auto,hierarchical,ring,rabenseifner,recursive_doubling}
PREFIX="chorus-bench-$$"
HOSTS=2
RANKS_PER_HOST=2
mkdir -p "$RESULTS"

store=$(mktemp -d)
logs=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "$PREFIX-br" $(seq -f "$PREFIX-h%g" 0 $((HOSTS - 1))); do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$store" "$logs"
}
trap cleanup EXIT

ip netns add "$PREFIX-br"
ip -n "$PREFIX-br" link add br0 type bridge
ip -n "$PREFIX-br" link set br0 up
for host in $(seq 0 $((HOSTS - 1))); do
  ns="$PREFIX-h$host"
  ip netns add "$ns"
  ip link add "h$host" netns "$ns" type veth peer name "p$host" netns "$PREFIX-br"
  ip -n "$PREFIX-br" link set "p$host" master br0 up
  ip -n "$ns" addr add "10.232.0.$((host + 1))/24" dev "h$host"
  ip -n "$ns" link set "h$host" up
  ip -n "$ns" link set lo up
done

size=$((HOSTS * RANKS_PER_HOST))
for rank in $(seq 0 $((size - 1))); do
  host=$((rank / RANKS_PER_HOST))
  ip netns exec "$PREFIX-h$host" env CHORUS_RANK="$rank" CHORUS_SIZE="$size" \
    CHORUS_STORE="file://$store" CHORUS_TCP_ADDR="10.232.0.$((host + 1))" \
    timeout 900 "$CHORUS" -b 4 -e 64M -n "${ITERS:-10}" -w "${WARMUP:-3}" -f "${FACTOR:-4}" \
    --transport auto --algo "$ALGOS" --json "$RESULTS/chorus-hierarchy-2x2.json" >"$logs/rank$rank.log" 2>&1 &
  pids+=($!)
done
status=0
for rank in "${!pids[@]}"; do
  if ! wait "${pids[$rank]}"; then
    echo "rank $rank failed:" >&2
    tail -20 "$logs/rank$rank.log" >&2
    status=1
  fi
done
pids=()
cat "$logs/rank0.log"
exit $status
