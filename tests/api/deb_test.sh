#!/usr/bin/env bash
# The Debian package holds the installed tree under /usr, with its links and metadata.
source tests/api/lib.sh
deb=$(bash packaging/make_deb.sh "$scratch/deb")
contents=$(dpkg-deb -c "$deb")
for path in ./usr/include/chorus/chorus.h ./usr/include/chorus/chorus_c.h ./usr/lib/libchorus.a \
  ./usr/lib/libchorus.so.0 ./usr/lib/pkgconfig/chorus.pc ./usr/lib/cmake/chorus/chorusConfig.cmake; do
  grep -q " $path\b" <<<"$contents" || { echo "FAIL: $path missing from $deb" >&2; exit 1; }
done
[ "$(dpkg-deb -f "$deb" Package)" = libchorus-dev ] || { echo "FAIL: package name" >&2; exit 1; }
# Unpacked anywhere, its pkg-config file finds its own prefix.
dpkg-deb -x "$deb" "$scratch/root"
libs=$(PKG_CONFIG_PATH="$scratch/root/usr/lib/pkgconfig" pkg-config --libs chorus)
[[ "$libs" == "-L$scratch/root/usr/lib/pkgconfig/../../lib -lchorus"* ]] ||
  { echo "FAIL: pkg-config --libs gives '$libs'" >&2; exit 1; }
echo "PASS: $(basename "$deb")"
