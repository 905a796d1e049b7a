#!/usr/bin/env bash
# Installs Chorus under a prefix: `bazel run //:install -- --prefix DIR` (tools/install.sh DIR
# does that), or run from a runfiles tree that holds //:chorus and the public headers (tests).
#   DIR/include/chorus/...            the public headers (C and C++)
#   DIR/lib/libchorus.so.X.Y.Z        with the links libchorus.so.X (SONAME) and libchorus.so
#   DIR/lib/libchorus.a
#   DIR/lib/pkgconfig/chorus.pc
#   DIR/lib/cmake/chorus/chorusConfig.cmake, chorusConfigVersion.cmake
# The tree is relocatable: the pkg-config file and the CMake package find the prefix from
# their own place.
set -euo pipefail

prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    *) echo "usage: install.sh --prefix DIR" >&2; exit 2 ;;
  esac
done
[ -n "$prefix" ] || { echo "usage: install.sh --prefix DIR" >&2; exit 2; }
# `bazel run` starts in the runfiles tree; a relative prefix means the caller's directory.
case "$prefix" in
  /*) ;;
  *) prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix" ;;
esac

# The runfiles of this script: the workspace's files as the source tree lays them out.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -d "$here/../include/chorus" ] && [ -f "$here/../libchorus.so" ]; then
  root="$here/.."
elif [ -n "${RUNFILES_DIR:-}" ] && [ -d "$RUNFILES_DIR/chorus/include/chorus" ]; then
  root="$RUNFILES_DIR/chorus"
else
  root="$0.runfiles/chorus"
fi
[ -f "$root/libchorus.so" ] || { echo "install.sh: libchorus.so not found near $root" >&2; exit 1; }

version_h="$root/include/chorus/version.h"
field() { sed -n "s/^#define CHORUS_VERSION_$1 \([0-9]*\)\$/\1/p" "$version_h"; }
major=$(field MAJOR) minor=$(field MINOR) patch=$(field PATCH)
version="$major.$minor.$patch"
fill() { sed -e "s/@VERSION@/$version/g" -e "s/@MAJOR@/$major/g" "$1" >"$2"; }

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/chorus"
rm -rf "$prefix/include/chorus"
cp -R "$root/include/chorus" "$prefix/include/chorus"
chmod -R u+w,a+rX "$prefix/include/chorus"
install -m 755 "$root/libchorus.so" "$prefix/lib/libchorus.so.$version"
ln -sfn "libchorus.so.$version" "$prefix/lib/libchorus.so.$major"
ln -sfn "libchorus.so.$major" "$prefix/lib/libchorus.so"
install -m 644 "$root/libchorus.a" "$prefix/lib/libchorus.a"
fill "$root/packaging/chorus.pc.in" "$prefix/lib/pkgconfig/chorus.pc"
fill "$root/packaging/chorusConfig.cmake.in" "$prefix/lib/cmake/chorus/chorusConfig.cmake"
fill "$root/packaging/chorusConfigVersion.cmake.in" \
  "$prefix/lib/cmake/chorus/chorusConfigVersion.cmake"
echo "installed chorus $version under $prefix"
