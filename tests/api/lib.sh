# Shared by the tests of the installed library: a scratch directory and rank processes that
# are always cleaned up, and an installation of //:chorus into a temporary prefix.
# Sourced by the *_test.sh scripts, which run from the runfiles root.
# pipefail: a failing producer fails its pipeline. (So a `grep -q` that stops reading early must
# read a here-string, not a pipe: its producer would die of SIGPIPE.)
set -euo pipefail

scratch=$(mktemp -d "${TEST_TMPDIR:-/tmp}/chorus_api.XXXXXX")
rank_pids=()
cleanup() {
  local pid
  for pid in "${rank_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${rank_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

# Installs Chorus under $scratch/prefix and sets $prefix.
install_chorus() {
  prefix="$scratch/prefix"
  bash packaging/install.sh --prefix "$prefix" >/dev/null
}

# run_ranks NAME SIZE PROGRAM ARGS...: runs PROGRAM STORE_URL RANK SIZE ARGS... as SIZE
# processes over a fresh file store, each bounded to 30 s; fails unless every rank prints
# "rank R: ok" and exits 0. A failing rank's output is shown.
run_ranks() {
  local name=$1 size=$2 program=$3
  shift 3
  local store="$scratch/store_$name" rank failed=0
  mkdir -p "$store"
  rank_pids=()
  for ((rank = 0; rank < size; rank++)); do
    timeout -s KILL 30 "$program" "file://$store" "$rank" "$size" "$@" \
      >"$scratch/$name.$rank.log" 2>&1 &
    rank_pids+=($!)
  done
  for ((rank = 0; rank < size; rank++)); do
    if ! wait "${rank_pids[$rank]}" || ! grep -q "^rank $rank: ok" "$scratch/$name.$rank.log"; then
      echo "FAIL: $name rank $rank:" >&2
      cat "$scratch/$name.$rank.log" >&2
      failed=1
    fi
  done
  rank_pids=()
  [ "$failed" -eq 0 ] && echo "PASS: $name ($size ranks)"
  return "$failed"
}

# run_killed_rank SIZE RANK_VARS COMMAND...: the frameworks' killed-rank check. Runs COMMAND as
# SIZE plain processes (a launcher would itself stop the survivors once a rank dies, at times
# before they report), each with every variable named in RANK_VARS set to its rank and with the
# caller's exports, each bounded to 120 s; output in $scratch/killed.<rank>.log. COMMAND's last
# rank dies mid-loop and every other prints "failed as expected". Passes when all SIZE - 1
# survivors do within 120 s; otherwise prints their logs' tails and fails.
run_killed_rank() {
  local size=$1 rank_vars=$2
  shift 2
  local start=$SECONDS rank pid variable assignments survivors
  rank_pids=()
  for ((rank = 0; rank < size; rank++)); do
    assignments=()
    for variable in $rank_vars; do assignments+=("$variable=$rank"); done
    env "${assignments[@]}" timeout -s KILL 120 "$@" >"$scratch/killed.$rank.log" 2>&1 &
    rank_pids+=($!)
  done
  for pid in "${rank_pids[@]}"; do wait "$pid" || true; done
  rank_pids=()
  cat "$scratch"/killed.*.log >"$scratch/killed.log"
  survivors=$(grep -c 'failed as expected' "$scratch/killed.log" || true)
  if [ "$survivors" -eq $((size - 1)) ] && [ $((SECONDS - start)) -lt 120 ]; then
    echo "PASS: a rank that dies fails the others with Chorus's error naming it"
    return 0
  fi
  echo "FAIL: killed rank: $survivors of $((size - 1)) survivors failed as expected" >&2
  tail -n 30 "$scratch/killed.log" >&2
  return 1
}
