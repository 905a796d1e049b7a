#!/usr/bin/env bash
# DDP step time with torch.distributed's "chorus" backend against "gloo" on the same model, in
# one run: 2 ranks on this host, backends alternated round by round (ROUNDS, default 5), the
# median step of each run, then the median per backend. Builds the backend against a fresh
# install of libchorus. Uses Debian's torch (/usr/bin/python3).
#
#   bash benchmarks/run_torch_ddp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash tools/install.sh "$work/prefix" >/dev/null
bash integrations/torch/build.sh "$work/prefix" "$work/python" >/dev/null
export PYTHONPATH="$work/python" OMP_NUM_THREADS=1
declare -A results
for round in $(seq 1 "${ROUNDS:-5}"); do
  for backend in chorus gloo; do
    # -r 2 -t 1: Debian's torch 1.13 under Python 3.11 cannot take the default 0 (see
    # tests/integrations/torch_test.sh).
    step=$(/usr/bin/python3 -m torch.distributed.run -r 2 -t 1 --log_dir "$work/logs" \
      --nproc_per_node 2 --master_port $((29500 + RANDOM % 400)) \
      benchmarks/torch_ddp_step.py "$backend" 2>/dev/null | sed -n 's/.*step_ms //p')
    echo "round $round $backend: $step ms per step"
    results[$backend]+="$step "
  done
done
for backend in chorus gloo; do
  python3 -c "import statistics, sys; print('$backend: median %.2f ms per step' % statistics.median(map(float, sys.argv[1:])))" ${results[$backend]}
done
