#!/usr/bin/env bash
# A program that links the system's shared Abseil and defines its own, aborting copies of
# Abseil functions Chorus uses (tests/api/clash_consumer.cc) still runs collectives with 3 rank
# processes: libchorus's Abseil is private to it.
source tests/api/lib.sh
install_chorus
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
g++ -std=c++17 -Wall -Wextra -Werror tests/api/clash_consumer.cc -o "$scratch/clash" \
  $(pkg-config --cflags --libs chorus) -Wl,-rpath,"$(pkg-config --variable=libdir chorus)" \
  -labsl_str_format_internal -labsl_strings -labsl_time
# The program's copies are really there to be found: it exports them to the shared Abseil.
grep -q '_ZN4absl.*6StrCat' <<<"$(nm -D --defined-only "$scratch/clash")" ||
  { echo "FAIL: the program's own absl::StrCat is not a dynamic symbol" >&2; exit 1; }
run_ranks clash 3 "$scratch/clash"
