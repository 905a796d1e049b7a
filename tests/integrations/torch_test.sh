#!/usr/bin/env bash
# torch.distributed's "chorus" backend, built against the installed libchorus (into a
# temporary prefix) and Debian's torch, run by torchrun as a user would:
#   - every collective, dtype and reduce op against gloo on the same ranks (2 and 4 ranks);
#   - DistributedDataParallel training, 30 steps with "chorus" and again with "gloo" on the same
#     seed and data: per-step losses equal within 1e-6 relative, final parameters identical
#     on every rank and between the backends' runs (2 and 4 ranks);
#   - the ranks meet through torchrun's MASTER_ADDR/MASTER_PORT, and through CHORUS_STORE;
#   - a rank that dies mid-training makes the others fail with Chorus's error naming it (those
#     ranks run as plain processes with torchrun's variables).
# Without torch (python3-torch) the test prints "SKIPPED: <why>" and passes as skipped.
source tests/api/lib.sh
python=/usr/bin/python3
if ! "$python" -c "import torch.distributed" 2>/dev/null; then
  echo "SKIPPED: torch_test: $python cannot import torch.distributed (install python3-torch)" >&2
  exit 0
fi
install_chorus
bash integrations/torch/build.sh "$prefix" "$scratch/python" "$python" >/dev/null
export PYTHONPATH="$scratch/python"
here=tests/integrations

# torchrun NPROC SCRIPT ARGS...: bounded to 240 s; rank output goes to $scratch/logs/<n>.
# Debian's torch 1.13 under Python 3.11 reads -r/-t values 0 and 3 as None (an enum change),
# so stderr is redirected (-r 2, kept under --log_dir) and stdout teed (-t 1).
# A free port whose successor is free too: torchrun's store takes MASTER_PORT and Chorus's
# MASTER_PORT+1. A random port could be another test's listener (a store that never answers
# torch's client).
free_port_pair() {
  "$python" - <<'PY'
import socket
for _ in range(100):
    with socket.socket() as first, socket.socket() as second:
        first.bind(("127.0.0.1", 0))
        port = first.getsockname()[1]
        try:
            second.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        print(port)
        break
PY
}
runs=0
torchrun() {
  local nproc=$1
  shift
  runs=$((runs + 1))
  log_dir="$scratch/logs/$runs"
  mkdir -p "$scratch/logs"
  # The agent logs its steps and its output unbuffered, so that a run stopped at the bound
  # shows how far the agent got.
  LOGLEVEL=INFO PYTHONUNBUFFERED=1 timeout -s KILL 240 \
    "$python" -m torch.distributed.run -r 2 -t 1 --log_dir "$log_dir" \
    --nproc_per_node "$nproc" --master_port "$(free_port_pair)" "$@" >"$log_dir.out" 2>&1
}
show_logs() {
  cat "$log_dir.out" >&2
  find "$log_dir" -name '*.log' -exec sh -c 'echo "--- $1"; tail -n 30 "$1"' _ {} \; >&2
}
failed=0
fail() { echo "FAIL: $*" >&2; show_logs; failed=1; }

for nproc in 2 4; do
  if torchrun "$nproc" "$here/torch_collectives.py" &&
    [ "$(grep -c '^\[default[0-9]\]:rank [0-9]*: ok' "$log_dir.out")" -eq "$nproc" ]; then
    echo "PASS: every collective matches gloo ($nproc ranks)"
  else
    fail "collectives against gloo ($nproc ranks)"
  fi
  for backend in chorus gloo; do
    torchrun "$nproc" "$here/torch_ddp_train.py" "$backend" "$scratch/ddp-$nproc-$backend" ||
      fail "DDP training with $backend ($nproc ranks)"
  done
  if "$python" - "$scratch/ddp-$nproc" "$nproc" <<'PY'; then
import json, sys
base, nproc = sys.argv[1], int(sys.argv[2])
runs = {b: [json.load(open("%s-%s-rank%d.json" % (base, b, r))) for r in range(nproc)]
        for b in ("chorus", "gloo")}
chorus, gloo = runs["chorus"][0]["losses"], runs["gloo"][0]["losses"]
loss_worst = max(abs(a - b) / abs(b) for a, b in zip(chorus, gloo))
assert len(chorus) == 30 and loss_worst <= 1e-6, "losses differ by %g relative" % loss_worst
assert chorus[-1] < chorus[0], "the loss did not fall: %s" % chorus
for r in range(1, nproc):
    assert runs["chorus"][r]["parameters"] == runs["chorus"][0]["parameters"], "rank %d" % r
worst = max(abs(a - b) for a, b in zip(runs["chorus"][0]["parameters"],
                                        runs["gloo"][0]["parameters"]))
assert worst <= 1e-5, "final parameters differ from gloo's by %g" % worst
print("losses %.4f -> %.4f; from gloo's: losses %g relative, parameters %g at most"
      % (chorus[0], chorus[-1], loss_worst, worst))
PY
    echo "PASS: DDP with chorus trains as with gloo ($nproc ranks)"
  else
    fail "DDP chorus against gloo ($nproc ranks)"
  fi
done

# With a Chorus store URL instead of torchrun's MASTER_ADDR/MASTER_PORT.
mkdir -p "$scratch/store"
if CHORUS_STORE="file://$scratch/store" torchrun 2 "$here/torch_collectives.py" &&
  [ "$(grep -c '^\[default[0-9]\]:rank [0-9]*: ok' "$log_dir.out")" -eq 2 ]; then
  echo "PASS: the backend meets through CHORUS_STORE too"
else
  fail "collectives with CHORUS_STORE (2 ranks)"
fi

# With torchrun's variables, as torchrun would set them.
WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port_pair) \
  run_killed_rank 3 "RANK LOCAL_RANK" "$python" "$here/torch_killed_rank.py" || failed=1
[ "$failed" -eq 0 ] && echo "PASS: torch backend"
exit "$failed"
