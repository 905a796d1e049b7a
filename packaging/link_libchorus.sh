#!/usr/bin/env bash
# Links libchorus.a and libchorus.so from Chorus's archives (see chorus_library.bzl):
#   link_libchorus.sh OUT.a OUT.so VERSION_SCRIPT VERSION_H CC LD OBJCOPY AR \
#       --archives A... --static-libs L... --dynamic-flags F...
set -euo pipefail
static_out=$1 shared_out=$2 version_script=$3 version_h=$4 cc=$5 ld=$6 objcopy=$7 ar=$8
shift 8
archives=() static_libs=() dynamic_flags=() list=""
for arg in "$@"; do
  case "$arg" in
    --archives | --static-libs | --dynamic-flags) list=$arg ;;
    *)
      case "$list" in
        --archives) archives+=("$arg") ;;
        --static-libs) static_libs+=("$arg") ;;
        --dynamic-flags) dynamic_flags+=("$arg") ;;
      esac
      ;;
  esac
done
major=$(sed -n 's/^#define CHORUS_VERSION_MAJOR \([0-9]*\)$/\1/p' "$version_h")
[ -n "$major" ] || { echo "no CHORUS_VERSION_MAJOR in $version_h" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Every Chorus object (whole archives: the C API reaches the rest through them), and of Abseil,
# hiredis and OpenSSL only the members they need. -d gives common symbols (OpenSSL has one) a
# definition, so they can be made local like the rest.
"$ld" -r -d -o "$work/partial.o" --whole-archive "${archives[@]}" --no-whole-archive \
  --start-group "${static_libs[@]}" --end-group
# Only the C API stays global; Chorus's C++ symbols, Abseil's and hiredis's become local to
# the object, in the static library as in the shared one. Two kinds of symbol are shared with
# the C++ runtime on purpose, because it keeps one copy of the state behind them (locale facet
# ids, exception personality) and a private copy of ours would be a second, uninitialised one:
# the standard library's own (std::, __gnu_cxx::) and the hidden DW.ref.* of exception
# handling. In the shared library they bind to the libstdc++ linked into it and the version
# script keeps them unexported; in the static one they bind to the program's libstdc++.
std_symbols=()
for prefix in _ZNSt _ZNKSt _ZSt _ZTVSt _ZTISt _ZTSSt _ZTTSt _ZZNSt _ZZNKSt _ZGVZNSt \
  _ZN9__gnu_cxx _ZNK9__gnu_cxx; do
  std_symbols+=(--keep-global-symbol="$prefix*")
done
"$objcopy" --wildcard --keep-global-symbol='chorus_*' --keep-global-symbol='DW.ref.*' \
  "${std_symbols[@]}" \
  "$work/partial.o" "$work/localized.o"
# objcopy cannot make a GNU-unique symbol (the one-per-process statics of inline functions and
# templates) local; renamed, Abseil's and Chorus's cannot meet a program's own copy in a static
# link (the standard library's stay shared, as above). The shared library's version script
# hides them all anyway.
nm --defined-only "$work/localized.o" |
  awk '$2 == "u" && $3 !~ /^(chorus_|_ZNSt|_ZNKSt|_ZSt|_ZZNSt|_ZZNKSt|_ZGVZNSt|_ZN9__gnu_cxx)/ {
    print $3, "_chorus_private_" $3 }' >"$work/unique.syms"
"$objcopy" --redefine-syms="$work/unique.syms" "$work/localized.o" "$work/chorus.o"

rm -f "$static_out"
"$ar" rcsD "$static_out" "$work/chorus.o"
"$cc" -shared -o "$shared_out" "$work/chorus.o" -Wl,-soname,"libchorus.so.$major" \
  -Wl,--version-script="$version_script" -Wl,-z,defs -Wl,--as-needed \
  -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic "${dynamic_flags[@]}" -lm
