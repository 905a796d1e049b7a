#!/usr/bin/env bash
# Chorus, Open MPI and Gloo side by side, one collective (allreduce float32 sum unless COLL
# says otherwise), for 2, 4 and 8 ranks over loopback TCP and over shared memory: sizes 4 B to
# 64 MiB by a factor of 4 (8 ranks, oversubscribed on a small machine: up to 4 MiB). Each round
# runs every library once per cell, in an order that rotates from round to round, so that no
# library always runs first or right after another, and the rounds follow one another so that
# each cell is measured at several moments of the machine's load. side_by_side.py then takes
# each library's median over the rounds and prints the table (also written to OUT/table.md).
#
#   bazel build //benchmarks:chorus_bench //benchmarks/gloo:gloo_bench //benchmarks/mpi:mpi_bench
#   bash benchmarks/run_latency_comparison.sh
#
# Small messages need many iterations and large ones few, so each cell is two sweeps:
# 4 B..64 KiB with -n 500 -w 100 and 256 KiB..the largest size with -n 10 -w 2. Every sweep
# first runs its smallest size untimed for 200 ms (--settle_ms): for the first tens of
# milliseconds the scheduler may still have two freshly started ranks on one core, and a small
# size's whole sweep takes less than that.
# Environment:
#   ROUNDS      rounds                                          (3)
#   COLL        allreduce, broadcast or barrier                 (allreduce)
#   RANKS       rank counts                                     ("2 4 8")
#   TRANSPORTS  tcp and/or shm                                  ("tcp shm")
#   MAX         largest size below 8 ranks                      (64M)
#   MAX8        largest size at 8 ranks                         (4M)
#   ITERS       -n of both sweeps                               (500 small, 10 large; barrier 3500)
#   WARMUP      -w of both sweeps                               (100 small, 2 large; barrier 700)
#   SETTLE_MS   --settle_ms of every sweep: the first size runs untimed this long (200)
#   MPI_BIND    mpirun --bind-to: none, core, ...               (none)
#   OUT         where the JSON, logs and table go; the previous run's files there are replaced
#               (benchmarks/results/side-by-side for allreduce, side-by-side-COLL otherwise)
# Transports: Chorus --transport tcp|shm; Open MPI's ob1 PML with the BTLs self,tcp (on lo) or
# self,vader (UCX, the other PML, would ignore the BTL choice); Gloo has TCP only. Each
# library's processes float over every core, as chorusrun's do: mpirun would otherwise pin each
# of 2 ranks to a core of its own. The first Chorus run (2 ranks, tcp, small sizes) measures the
# machine limits, which head the table. A run that fails (Gloo has failed at 8 ranks with
# "Connection closed by peer") is recorded in OUT/failures.txt and the script carries on.
set -euo pipefail
cd "$(dirname "$0")/.."

CHORUSRUN=integrations/launcher/chorusrun.py
CHORUS=bazel-bin/benchmarks/chorus_bench
GLOO=bazel-bin/benchmarks/gloo/gloo_bench
MPI=bazel-bin/benchmarks/mpi/mpi_bench
ROUNDS=${ROUNDS:-3}
COLL=${COLL:-allreduce}
RANKS=${RANKS:-2 4 8}
TRANSPORTS=${TRANSPORTS:-tcp shm}
MAX=${MAX:-64M}
MAX8=${MAX8:-4M}
if [ "$COLL" = allreduce ]; then
  OUT=${OUT:-benchmarks/results/side-by-side}
else
  OUT=${OUT:-benchmarks/results/side-by-side-$COLL}
fi
# A barrier has a single row, which would also carry the start-up transient (the first calls
# after the ranks start, while the scheduler settles) that the first of a sweep's seven rows
# absorbs for the other collectives: it runs as many calls as that whole sweep.
small_iters=500
small_warmup=100
if [ "$COLL" = barrier ]; then
  small_iters=3500
  small_warmup=700
fi
SMALL=(-b 4 -e 64K -f 4 -n "${ITERS:-$small_iters}" -w "${WARMUP:-$small_warmup}")
LARGE=(-b 256K -f 4 -n "${ITERS:-10}" -w "${WARMUP:-2}")

for binary in "$CHORUS" "$GLOO" "$MPI"; do
  if [ ! -x "$binary" ]; then
    echo "missing $binary: bazel build //benchmarks:chorus_bench //benchmarks/gloo:gloo_bench" \
      "//benchmarks/mpi:mpi_bench" >&2
    exit 1
  fi
done
case "$COLL" in
  allreduce | broadcast | barrier) ;;
  *) echo "COLL=$COLL: all three libraries measure allreduce, broadcast and barrier" >&2; exit 1 ;;
esac
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

mkdir -p "$OUT/logs"
rm -f "$OUT"/*.json "$OUT"/logs/*.log "$OUT/failures.txt" "$OUT/table.md"
: >"$OUT/failures.txt"
limits_taken=0

# Bytes of a size such as 64K or 4M, to compare with the large sweep's start.
bytes_of() {
  local n=${1%[kKmMgG]}
  case "$1" in
    *[kK]) echo $((n << 10)) ;;
    *[mM]) echo $((n << 20)) ;;
    *[gG]) echo $((n << 30)) ;;
    *) echo "$n" ;;
  esac
}

# The largest size for a rank count.
max_for() {
  if [ "$1" -ge 8 ]; then echo "$MAX8"; else echo "$MAX"; fi
}

# library ranks transport part: runs one sweep, writing OUT/rROUND-...json and its log.
measure() {
  local library=$1 ranks=$2 transport=$3 part=$4
  local name="r${round}-${library}-${transport}-${ranks}ranks-${part}"
  local max
  max=$(max_for "$ranks")
  local sweep=("${SMALL[@]}")
  if [ "$part" = large ]; then
    sweep=("${LARGE[@]}" -e "$max")
  elif [ "$(bytes_of "$max")" -lt 65536 ]; then
    sweep=("${SMALL[@]}" -e "$max")
  fi
  local limits=0
  if [ "$library" = chorus ] && [ "$limits_taken" -eq 0 ]; then
    limits=1
    limits_taken=1
  fi
  local common=("${sweep[@]}" --coll "$COLL" --settle_ms "${SETTLE_MS:-200}" --limits "$limits"
    --json "$OUT/$name.json")
  local command
  case "$library" in
    chorus)
      command=(python3 "$CHORUSRUN" -n "$ranks" --store file --timeout 900 -- "$CHORUS"
        "${common[@]}" --transport "$transport") ;;
    gloo)
      command=(python3 "$CHORUSRUN" -n "$ranks" --store file --timeout 900 -- "$GLOO"
        "${common[@]}" --algo all) ;;
    openmpi)
      local btl=(--mca btl "self,tcp" --mca btl_tcp_if_include lo)
      [ "$transport" = shm ] && btl=(--mca btl "self,vader")
      command=(timeout 900 mpirun -np "$ranks" --oversubscribe --bind-to "${MPI_BIND:-none}"
        --mca pml ob1 "${btl[@]}" "$MPI" "${common[@]}" --transport "$transport") ;;
  esac
  echo "=== round $round/$ROUNDS, $ranks ranks, $transport: $library ($part sizes)"
  if ! "${command[@]}" >"$OUT/logs/$name.log" 2>&1; then
    echo "=== FAILED: $name (log: $OUT/logs/$name.log)"
    tail -n 5 "$OUT/logs/$name.log" | sed 's/^/    /'
    echo "$name" >>"$OUT/failures.txt"
  fi
}

libraries=(chorus openmpi gloo)
parts=(small)
[ "$COLL" != barrier ] && parts+=(large)  # barrier has one size, no buffers
for round in $(seq 1 "$ROUNDS"); do
  # Round r starts with library r-1 (mod 3): chorus, openmpi, gloo; openmpi, gloo, chorus; ...
  shift_by=$(((round - 1) % ${#libraries[@]}))
  order=("${libraries[@]:shift_by}" "${libraries[@]:0:shift_by}")
  for ranks in $RANKS; do
    for transport in $TRANSPORTS; do
      for part in "${parts[@]}"; do
        [ "$part" = large ] && [ "$(bytes_of "$(max_for "$ranks")")" -lt 262144 ] && continue
        for library in "${order[@]}"; do
          [ "$library" = gloo ] && [ "$transport" != tcp ] && continue  # Gloo has no shm
          measure "$library" "$ranks" "$transport" "$part"
        done
      done
    done
  done
done

if [ -s "$OUT/failures.txt" ]; then
  echo "=== $(wc -l <"$OUT/failures.txt") runs failed (see $OUT/failures.txt and $OUT/logs/)"
fi
python3 benchmarks/side_by_side.py --markdown-out "$OUT/table.md" "$OUT"/*.json
echo "table: $OUT/table.md"
