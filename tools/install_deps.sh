#!/usr/bin/env bash
# Installs the Debian packages Chorus needs to build and test, only those that are missing.
# Idempotent; safe to run on every invocation. Needs root (or sudo) when something is missing.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-bootstrap-source  # Bazel 4.2.3 and its offline mock rule repositories
  g++ libabsl-dev catch2                  # compiler, Abseil, Catch2 v2
  libgloo-dev python3-matplotlib         # Gloo side-by-side benchmark; result plots
  libhiredis-dev redis-server             # Redis store and the real server its tests start
  libibverbs-dev                          # verbs transport headers
  libssl-dev openssl                      # TLS and HMAC of TCP links; test certificates
  python3-torch libtorch-dev pybind11-dev # the torch.distributed backend and its tests
  iproute2 procps                         # ip (network namespaces), ps/pkill in tests
  python3                                 # test-summary and plotting scripts
  clang-14 libclang-rt-14-dev             # libFuzzer and sanitizer runtimes (tools/fuzz.sh)
  binutils cmake pkg-config               # libchorus's link (ld -r, objcopy); consumer tests
)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "[chorus] installing missing packages: ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
