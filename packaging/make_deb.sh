#!/usr/bin/env bash
# Builds a Debian package of the installed tree (prefix /usr): `bazel run //:deb -- OUT_DIR`
# writes OUT_DIR/libchorus-dev_<version>_amd64.deb with the same files tools/install.sh lays
# out. The pkg-config file and CMake package are relocatable, so /usr needs no change to them.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: make_deb.sh OUT_DIR" >&2; exit 2; }
out=$1
case "$out" in /*) ;; *) out="${BUILD_WORKING_DIRECTORY:-$PWD}/$out" ;; esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
install_sh="$here/install.sh"
[ -f "$install_sh" ] || install_sh="$0.runfiles/chorus/packaging/install.sh"

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
bash "$install_sh" --prefix "$staging/usr" >/dev/null
version=$(sed -n 's/^#define CHORUS_VERSION_STRING "\(.*\)"$/\1/p' \
  "$staging/usr/include/chorus/version.h")
mkdir -p "$staging/DEBIAN" "$out"
cat >"$staging/DEBIAN/control" <<CONTROL
Package: libchorus-dev
Version: $version
Architecture: amd64
Section: libdevel
Priority: optional
Maintainer: Chorus developers <chorus@localhost>
Depends: libc6, libgcc-s1
Suggests: libibverbs1, ibverbs-providers
Installed-Size: $(du -sk "$staging/usr" | cut -f1)
Description: Chorus collective communication library (C and C++ API)
 Allreduce, allgather, broadcast, reduce-scatter, alltoall and point-to-point
 for N processes over TCP, shared memory and InfiniBand / RoCE verbs (libibverbs
 is loaded when the verbs transport is used). libchorus.so exports only its C API
 and carries its own Abseil and hiredis.
CONTROL
deb="$out/libchorus-dev_${version}_amd64.deb"
# gzip, not dpkg's default xz: xz spends half a minute of a core on the static library (about
# 10 % smaller), which a loaded build machine turns into minutes.
dpkg-deb -Zgzip --root-owner-group --build "$staging" "$deb" >/dev/null
echo "$deb"
