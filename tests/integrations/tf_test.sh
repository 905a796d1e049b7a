#!/usr/bin/env bash
# chorus_tf, the TensorFlow op library, built against the installed libchorus (into a temporary
# prefix) and TensorFlow from the Python package index (tools/install_deps.sh installs the
# pinned tensorflow-cpu into $CHORUS_TF_PYTHON's environment), run as chorusrun ranks:
#   - every op and dtype, eagerly and in graph mode, against NumPy, and the gradients (2, 4);
#   - Keras training with DistributedGradientTape and with DistributedOptimizer.fit: weights
#     identical on every rank after every step, equal to single-process training (2, 4);
#   - a rank that dies mid-training makes the others fail with Chorus's error naming it.
# Without TensorFlow the test prints "SKIPPED: <why>" and passes as skipped.
source tests/api/lib.sh
python=${CHORUS_TF_PYTHON:-/var/lib/chorus/tf-venv/bin/python}
if ! "$python" -c "import tensorflow" 2>/dev/null; then
  echo "SKIPPED: tf_test: $python cannot import tensorflow (tools/install_deps.sh installs it" \
    "from the Python package index)" >&2
  exit 0
fi
install_chorus
bash integrations/tensorflow/build.sh "$prefix" "$scratch/python" "$python" >/dev/null
export PYTHONPATH="$scratch/python" TF_CPP_MIN_LOG_LEVEL=2
here=tests/integrations
failed=0

# ranks NAME N SCRIPT: N ranks under chorusrun, bounded; output in $scratch/NAME.log.
ranks() {
  timeout -s KILL 300 python3 integrations/launcher/chorusrun.py -n "$2" --store file \
    --timeout 240 -- "$python" "$3" >"$scratch/$1.log" 2>&1
}
expect_ok() {  # NAME N SCRIPT WHAT
  if ranks "$1" "$2" "$3" && [ "$(grep -c '^\[rank [0-9]*\] rank [0-9]*: ok' "$scratch/$1.log")" -eq "$2" ]; then
    echo "PASS: $4 ($2 ranks)"
  else
    echo "FAIL: $4 ($2 ranks)" >&2
    grep -v -e cpu_feature -e oneDNN -e AVX "$scratch/$1.log" | tail -n 40 >&2
    failed=1
  fi
}
for n in 2 4; do
  expect_ok "ops-$n" "$n" "$here/tf_ops.py" "every op and dtype, eager and graph, and gradients"
  expect_ok "keras-$n" "$n" "$here/tf_keras_train.py" "Keras training equals single-process"
done
mkdir -p "$scratch/killed-store"
CHORUS_SIZE=3 CHORUS_STORE="file://$scratch/killed-store" \
  run_killed_rank 3 CHORUS_RANK "$python" "$here/tf_killed_rank.py" || failed=1
[ "$failed" -eq 0 ] && echo "PASS: tensorflow backend"
exit "$failed"
