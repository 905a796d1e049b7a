#!/usr/bin/env bash
# What securing the TCP links costs, in one run: 2-rank allreduce float32 sum over TCP with a
# file store, plain, with a job secret, under TLS, and under TLS with a secret, modes alternated
# round by round so they see the same machine; then the median per size and mode and each
# mode's time against plain (security_cost.py). The machine limits (memcpy, loopback TCP) are
# printed by the first run. Uses the test certificates of tests/security/testdata.
#
#   bash benchmarks/run_security.sh      (after bazel build //benchmarks:chorus_bench)
# ROUNDS (default 3), ITERS (-n, default 10) and MAXBYTES (-e, default 64M) override.
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=benchmarks/results/security
CHORUSRUN=integrations/launcher/chorusrun.py
CHORUS=bazel-bin/benchmarks/chorus_bench
CERTS=tests/security/testdata
mkdir -p "$RESULTS"
rm -f "$RESULTS"/*.json

bench() {  # mode round limits
  local mode=$1 round=$2 limits=$3
  local -a env=()
  case "$mode" in
    secret) env=(CHORUS_AUTH_KEY=benchmark-job-secret-0123456789) ;;
    tls) env=(CHORUS_TLS_CERT=$CERTS/member.pem CHORUS_TLS_KEY=$CERTS/member.key
      CHORUS_TLS_CA=$CERTS/ca.pem) ;;
    tls+secret) env=(CHORUS_AUTH_KEY=benchmark-job-secret-0123456789
      CHORUS_TLS_CERT=$CERTS/member.pem CHORUS_TLS_KEY=$CERTS/member.key
      CHORUS_TLS_CA=$CERTS/ca.pem) ;;
  esac
  echo "=== $mode, round $round"
  env "${env[@]}" python3 "$CHORUSRUN" -n 2 --store file --timeout 900 -- "$CHORUS" \
    -b 4 -e "${MAXBYTES:-64M}" -f 16 -n "${ITERS:-10}" -w 3 --transport tcp --limits "$limits" \
    --json "$RESULTS/$mode-$round.json" | grep -E "^\[rank 0\] (#   [a-z]|  +[0-9])"
}

for round in $(seq 1 "${ROUNDS:-3}"); do
  for mode in plain secret tls tls+secret; do
    limits=0
    [ "$round" = 1 ] && [ "$mode" = plain ] && limits=1
    bench "$mode" "$round" "$limits"
  done
done
python3 benchmarks/security_cost.py "$RESULTS"
