#!/usr/bin/env bash
# Installs the Debian packages Chorus needs to build and test, only those that are missing.
# Idempotent; safe to run on every invocation. Needs root (or sudo) when something is missing.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-bootstrap-source  # Bazel 4.2.3 and its offline mock rule repositories
  g++ libabsl-dev catch2                  # compiler, Abseil, Catch2 v2
  libgloo-dev python3-matplotlib         # Gloo side-by-side benchmark; result plots
  openmpi-bin libopenmpi-dev              # Open MPI, for the side-by-side comparison only
  libhiredis-dev redis-server             # Redis store and the real server its tests start
  libibverbs-dev                          # verbs transport headers
  libssl-dev openssl                      # TLS and HMAC of TCP links; test certificates
  python3-torch libtorch-dev pybind11-dev # the torch.distributed backend and its tests
  python3-venv                            # the environment TensorFlow is installed into
  iproute2 procps                         # ip (network namespaces), ps/pkill in tests
  python3                                 # test-summary and plotting scripts
  clang-14 libclang-rt-14-dev             # libFuzzer and sanitizer runtimes (tools/fuzz.sh)
  binutils cmake pkg-config               # libchorus's link (ld -r, objcopy); consumer tests
)

# The verbs tests' Soft-RoCE guest (QEMU, busybox, perftest, ibverbs-utils) is installed by
# tools/rxe_vm.sh when tools/test.sh first runs it; where those packages cannot be installed,
# the verbs tests are reported as skipped instead of failing the whole suite.

# The CUDA toolkit (nvcc, cudart) is not installed here: it comes with the build machines' image
# at /usr/local/cuda (NVIDIA's CUDA 13 packages). Where it is absent, --config=cuda cannot build
# and tools/test.sh reports the CUDA stage as skipped; install NVIDIA's cuda-toolkit package (or
# Debian's nvidia-cuda-toolkit from non-free, linked to /usr/local/cuda) to build it.

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "[chorus] installing missing packages: ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# TensorFlow for the chorus_tf op library and its tests, from the Python package index, pinned,
# in a virtual environment of its own (Debian's Python refuses system-wide pip installs). About
# 600 MB with its dependencies, a minute or two to fetch. If the index cannot be reached, the
# TensorFlow tests report themselves skipped, saying why.
TF_VERSION=2.21.0
TF_ENV=/var/lib/chorus/tf-venv
if ! compgen -G "$TF_ENV/lib/python3*/site-packages/tensorflow_cpu-$TF_VERSION.dist-info" >/dev/null; then
  echo "[chorus] installing tensorflow-cpu==$TF_VERSION into $TF_ENV" >&2
  $SUDO mkdir -p "$(dirname "$TF_ENV")"
  # Debian's interpreter, whatever else is first on PATH: the wheel is built for its 3.11.
  if ! { $SUDO /usr/bin/python3 -m venv "$TF_ENV" &&
    $SUDO "$TF_ENV/bin/pip" install -q --no-cache-dir "tensorflow-cpu==$TF_VERSION"; }; then
    echo "[chorus] WARNING: tensorflow-cpu could not be installed; its tests will be skipped" >&2
  fi
fi
