#!/usr/bin/env bash
# The shared-memory transport's targets in one run, so every figure sees the same machine state:
# 2 ranks over TCP and over shm up to 64 MiB (with the machine limits), 64 MiB over shm with the
# buffers in shared memory (--buffers shared, with its own limits), 8 B over shm with many
# iterations, and 8 ranks over shm (oversubscribed on small machines) up to 1 MiB; all
# allreduce float32 sum with the selector's choice and a file store. Writes JSON to
# benchmarks/results/ and prints shm_targets.py's verdicts.
#
#   bash benchmarks/run_shm.sh        (after bazel build //benchmarks:chorus_bench)
# ITERS / WARMUP / FACTOR override -n / -w / -f of the sweeps.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=benchmarks/results
CHORUSRUN=integrations/launcher/chorusrun.py
CHORUS=bazel-bin/benchmarks/chorus_bench
SWEEP=(-n "${ITERS:-10}" -w "${WARMUP:-3}" -f "${FACTOR:-4}")
mkdir -p "$RESULTS"

bench() {  # ranks json chorus_bench-flags...
  local ranks=$1 json=$2
  shift 2
  python3 "$CHORUSRUN" -n "$ranks" --store file --timeout 900 -- "$CHORUS" "$@" \
    --algo auto --json "$RESULTS/$json"
}

echo "=== 2 ranks, tcp"
bench 2 shm-run-tcp-2ranks.json -b 4 -e 64M "${SWEEP[@]}" --transport tcp --limits 0
echo "=== 2 ranks, shm"
bench 2 shm-run-shm-2ranks.json -b 4 -e 64M "${SWEEP[@]}" --transport shm
echo "=== 2 ranks, shm, buffers in shared memory (read in place)"
bench 2 shm-run-shm-shared-2ranks.json -b 64M -e 64M "${SWEEP[@]}" --transport shm \
  --buffers shared
echo "=== 8 B, 2 ranks, shm, 20000 iterations"
bench 2 shm-run-8b.json -b 8 -e 8 -n 20000 -w 1000 --transport shm --limits 0
echo "=== 8 ranks, shm"
bench 8 shm-run-shm-8ranks.json -b 4 -e 1M "${SWEEP[@]}" --transport shm --limits 0
echo "=== targets"
python3 benchmarks/shm_targets.py --tcp "$RESULTS/shm-run-tcp-2ranks.json" \
  --shm "$RESULTS/shm-run-shm-2ranks.json" --latency "$RESULTS/shm-run-8b.json" \
  --oversubscribed "$RESULTS/shm-run-shm-8ranks.json" \
  --shm-shared "$RESULTS/shm-run-shm-shared-2ranks.json"
