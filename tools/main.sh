#!/usr/bin/env bash
# The main job (README): a real multi-rank allreduce benchmark over TCP on this machine with a
# file store: float32 sum, 2 then 4 ranks, 8 B to 64 MiB, the machine limits printed before
# each table. Exits non-zero if any element is wrong (chorus_bench and chorusrun do).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install_deps.sh
bazel build //benchmarks:chorus_bench
for ranks in 2 4; do
  echo "=== chorus allreduce float32 sum, $ranks ranks, tcp, file store"
  python3 integrations/launcher/chorusrun.py -n "$ranks" --store file --timeout 240 -- \
    bazel-bin/benchmarks/chorus_bench -b 8 -e 64M -f 4 -n 5 -w 2 -d float32 -o sum \
    --transport tcp
done
