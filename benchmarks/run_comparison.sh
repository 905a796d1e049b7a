#!/usr/bin/env bash
# Chorus beside Gloo, allreduce float32 sum over loopback TCP with a file store, back to back in
# one run so both see the same machine state: 2 and 4 ranks from 4 B to 64 MiB (every Chorus
# allreduce algorithm, the selector's choice `auto`, every Gloo algorithm), then an
# oversubscribed latency check at 8 ranks up to 1 MiB, then Chorus over shared memory (2 and 8
# ranks). Writes JSON to benchmarks/results/,
# prints compare.py's ratio tables and draws the PNG with plot.py.
#
#   bash benchmarks/run_comparison.sh        (after bazel build //benchmarks:chorus_bench
#                                             //benchmarks/gloo:gloo_bench)
# ITERS / WARMUP / FACTOR override -n / -w / -f.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=benchmarks/results
CHORUSRUN=integrations/launcher/chorusrun.py
CHORUS=bazel-bin/benchmarks/chorus_bench
GLOO=bazel-bin/benchmarks/gloo/gloo_bench
SWEEP=(-n "${ITERS:-10}" -w "${WARMUP:-3}" -f "${FACTOR:-4}")
mkdir -p "$RESULTS"

run() {  # ranks max_bytes tag
  local ranks=$1 max=$2 tag=$3
  echo "=== chorus, $ranks ranks"
  python3 "$CHORUSRUN" -n "$ranks" --store file --timeout 900 -- "$CHORUS" -b 4 -e "$max" \
    "${SWEEP[@]}" --algo all,auto --json "$RESULTS/chorus-allreduce-$tag.json"
  echo "=== gloo, $ranks ranks"
  # Gloo itself has failed here (8 ranks: "Connection closed by peer"); keep Chorus's results.
  if ! python3 "$CHORUSRUN" -n "$ranks" --store file --timeout 900 -- "$GLOO" -b 4 -e "$max" \
    "${SWEEP[@]}" --algo all --json "$RESULTS/gloo-allreduce-$tag.json"; then
    echo "=== gloo failed on $ranks ranks; no comparison"
    return 0
  fi
  echo "=== compare.py chorus/gloo, $ranks ranks (ratio > 1: Chorus faster)"
  for algo in $(python3 -c 'import json,sys; print(" ".join(r["algorithm"].split(" ")[0]
      for r in json.load(open(sys.argv[1]))["runs"]))' "$RESULTS/chorus-allreduce-$tag.json"); do
    [ "$algo" = auto ] && continue  # auto's recorded name carries the picks; shown in the tables
    python3 benchmarks/compare.py "$RESULTS/chorus-allreduce-$tag.json" \
      "$RESULTS/gloo-allreduce-$tag.json" --algo-a "$algo"
  done
}

echo "=== 8 B latency, 2 ranks, 200 iterations (compare with the 8 B round trip above)"
python3 "$CHORUSRUN" -n 2 --timeout 300 -- "$CHORUS" -b 8 -e 8 -n 200 -w 20 --limits 0 \
  --algo auto,recursive_doubling
python3 "$CHORUSRUN" -n 2 --timeout 300 -- "$GLOO" -b 8 -e 8 -n 200 -w 20 --limits 0 \
  --algo ring,halving_doubling
run 2 64M 2ranks
run 4 64M 4ranks
run 8 1M 8ranks
# The same allreduce over the shared-memory transport (no Gloo counterpart: Gloo has none).
echo "=== 8 B latency over shm, 2 ranks, 200 iterations"
python3 "$CHORUSRUN" -n 2 --timeout 300 -- "$CHORUS" -b 8 -e 8 -n 200 -w 20 --limits 0 \
  --transport shm --algo auto
for ranks_max in 2:64M 8:1M; do
  ranks=${ranks_max%:*}
  echo "=== chorus over shm, $ranks ranks"
  python3 "$CHORUSRUN" -n "$ranks" --store file --timeout 900 -- "$CHORUS" -b 4 \
    -e "${ranks_max#*:}" "${SWEEP[@]}" --transport shm --algo auto \
    --json "$RESULTS/chorus-shm-allreduce-${ranks}ranks.json"
done
/usr/bin/python3 benchmarks/plot.py -o "$RESULTS/allreduce-chorus-vs-gloo.png" \
  "$RESULTS"/chorus-allreduce-2ranks.json "$RESULTS"/gloo-allreduce-2ranks.json \
  "$RESULTS"/chorus-allreduce-4ranks.json "$RESULTS"/gloo-allreduce-4ranks.json
echo "plot: $RESULTS/allreduce-chorus-vs-gloo.png"
