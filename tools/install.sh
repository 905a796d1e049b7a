#!/usr/bin/env bash
# Builds libchorus and installs it under DIR (headers, libchorus.so*, libchorus.a, pkg-config
# file, CMake package): tools/install.sh DIR. docs/building.md says how to use the result.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: tools/install.sh DIR" >&2; exit 2; }
prefix=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bazel run //:install -- --prefix "$prefix"
