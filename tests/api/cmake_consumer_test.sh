#!/usr/bin/env bash
# Installs Chorus into a temporary prefix and, outside Bazel, configures and builds the C++17
# consumer (tests/api/cpp_consumer) with CMake's find_package(chorus); runs it with 3 rank
# processes over a file store.
source tests/api/lib.sh
install_chorus
cp -R tests/api/cpp_consumer "$scratch/src"
cmake -S "$scratch/src" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$scratch/cmake.log" 2>&1 || { cat "$scratch/cmake.log" >&2; exit 1; }
cmake --build "$scratch/build" >"$scratch/build.log" 2>&1 || { cat "$scratch/build.log" >&2; exit 1; }
run_ranks cpp_cmake 3 "$scratch/build/cpp_consumer"
# A version of another major is refused (the major version is the ABI).
sed -i 's/find_package(chorus 0.1 REQUIRED)/find_package(chorus 1.0 REQUIRED)/' \
  "$scratch/src/CMakeLists.txt"
if cmake -S "$scratch/src" -B "$scratch/build_v1" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$scratch/cmake_v1.log" 2>&1; then
  echo "FAIL: find_package(chorus 1.0) accepted version 0.1" >&2
  exit 1
fi
echo "PASS: find_package(chorus 1.0) refused"
