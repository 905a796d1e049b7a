#!/usr/bin/env bash
# Installs Chorus into a temporary prefix and, outside Bazel, builds the C99 consumer with
# `pkg-config --cflags --libs chorus` and plain gcc (-std=c99 -Wall -Werror), once against
# libchorus.so and once against libchorus.a; runs each with 3 rank processes over a file store.
source tests/api/lib.sh
install_chorus
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir chorus)

gcc -std=c99 -Wall -Wextra -Werror -pedantic tests/api/c_consumer.c -o "$scratch/c_shared" \
  $(pkg-config --cflags --libs chorus) -Wl,-rpath,"$libdir"
# Nothing but libchorus itself and the C and math runtimes at run time.
needed=$(readelf -d "$scratch/c_shared" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
[ "$needed" = "libc.so.6 libchorus.so.0 " ] || { echo "FAIL: c_shared needs: $needed" >&2; exit 1; }
run_ranks c_shared 3 "$scratch/c_shared" tcp
run_ranks c_shared_auto 3 "$scratch/c_shared" auto

# The static library: `pkg-config --static` adds what libchorus.a needs.
static_libs=$(pkg-config --static --libs chorus | sed 's/-lchorus\b/-l:libchorus.a/')
gcc -std=c99 -Wall -Wextra -Werror -pedantic tests/api/c_consumer.c -o "$scratch/c_static" \
  $(pkg-config --cflags chorus) $static_libs
if grep -q libchorus <<<"$(readelf -d "$scratch/c_static")"; then
  echo "FAIL: c_static still needs libchorus.so" >&2
  exit 1
fi
run_ranks c_static 3 "$scratch/c_static" tcp
