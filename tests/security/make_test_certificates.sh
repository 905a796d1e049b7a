#!/usr/bin/env bash
# Writes the test-only certificates under testdata/ (committed; run again to renew them):
#   ca.pem              the job's CA
#   member.pem/.key     a certificate the CA signed (every test rank uses it)
#   other_ca.pem        a CA of another job
#   stranger.pem/.key   a certificate the other CA signed: a process of another job
# EC P-256 keys, valid for 100 years. Never use these keys for anything but tests.
set -euo pipefail
cd "$(dirname "$0")/testdata"
days=36500
make_ca() {  # name subject
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -keyout "$1.key" \
    -out "$1.pem" -days "$days" -subj "$2" -sha256 2>/dev/null
}
make_leaf() {  # name subject ca
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -keyout "$1.key" \
    -out "$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -out "$1.pem" \
    -days "$days" -sha256 2>/dev/null
  rm -f "$1.csr"
}
make_ca ca "/CN=chorus-test-ca"
make_leaf member "/CN=chorus-test-member" ca
make_ca other_ca "/CN=chorus-other-ca"
make_leaf stranger "/CN=chorus-stranger" other_ca
rm -f ./*.srl ca.key other_ca.key
chmod 600 ./*.key
