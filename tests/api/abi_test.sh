#!/usr/bin/env bash
# ABI hygiene of the installed library. Fails if libchorus.so exports anything but the C API
# (chorus_*, and its version node), lacks its SONAME, needs a library other than the C runtime
# (Abseil, hiredis and libstdc++ are inside it; libibverbs is loaded only when the verbs
# transport is used, so it is neither needed nor imported), or if libchorus.a defines a global Abseil,
# hiredis or Chorus-internal symbol, or if an installed header includes anything but the
# standard library and chorus/ headers, or does not compile on its own.
source tests/api/lib.sh
install_chorus
lib="$prefix/lib"
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }

major=$(sed -n 's/^#define CHORUS_VERSION_MAJOR \([0-9]*\)$/\1/p' "$prefix/include/chorus/version.h")
so="$lib/libchorus.so.$major"
[ -f "$so" ] || fail "no $so"

# Exported symbols: the C API, and the version node that names the ABI.
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//')
foreign=$(echo "$exported" | grep -v -e '^chorus_' -e "^CHORUS_$major\$" || true)
[ -z "$foreign" ] || fail "libchorus.so exports non-Chorus symbols: $(echo "$foreign" | head -5)"
grep -q '^chorus_allreduce$' <<<"$exported" || fail "chorus_allreduce is not exported"
# Every function of chorus_c.h is exported.
for function in $(grep -o 'chorus_[a-z_]*(' "$prefix/include/chorus/chorus_c.h" | tr -d '(' | sort -u); do
  grep -qx "$function" <<<"$exported" || fail "$function is declared but not exported"
done

soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libchorus.so.$major" ] || fail "SONAME is '$soname', not libchorus.so.$major"
[ "$(readlink "$lib/libchorus.so")" = "libchorus.so.$major" ] || fail "libchorus.so link"

needed=$(readelf -d "$so" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
for library in $needed; do
  case "$library" in
    libc.so.6 | libm.so.6 | libgcc_s.so.1 | ld-linux-x86-64.so.2) ;;
    *) fail "libchorus.so needs $library" ;;
  esac
done
# No strong reference to an outside Abseil or hiredis either (a weak one is an optional hook).
imported=$(nm -D --undefined-only "$so" | awk '$1 == "U" {print $2}')
absl_imports=$(echo "$imported" | grep -i -e absl -e redis || true)
[ -z "$absl_imports" ] || fail "libchorus.so imports: $(echo "$absl_imports" | head -3)"
verbs_imports=$(echo "$imported" | grep '^ibv_' || true)
[ -z "$verbs_imports" ] || fail "libchorus.so imports libibverbs: $(echo "$verbs_imports" | head -3)"

# The static library: Abseil, hiredis and Chorus's C++ stay local (renamed where they must stay
# global: _chorus_private_*); only the standard library's symbols are shared with the program.
globals=$(nm -g --defined-only "$lib/libchorus.a" | awk 'NF == 3 {print $3}')
leaked=$(echo "$globals" | grep -v -e '^chorus_' -e '^_chorus_private_' -e '^DW\.ref\.' \
  -e '^_Z[A-Z]*N*K*St' -e '^_ZN*K*9__gnu_cxx' || true)
[ -z "$leaked" ] || fail "libchorus.a defines global non-Chorus symbols: $(echo "$leaked" | head -5)"

# Installed headers: only chorus/ and standard headers, and each compiles on its own.
while IFS= read -r header; do
  relative=${header#"$prefix/include/"}
  includes=$(grep -E '^\s*#\s*include' "$header" || true)
  other=$(echo "$includes" | grep -v -E '#\s*include\s*("chorus/|<[a-z_]+(\.h)?>)' || true)
  [ -z "$other" ] || fail "$relative includes $other"
  if grep -q -i absl "$header"; then fail "$relative mentions absl"; fi
  case "$relative" in
    chorus/chorus_c.h | chorus/version.h)
      printf "#include \"%s\"\nint chorus_abi_test_unit;\n" "$relative" | gcc -std=c99 -Wall -Wextra -Werror -pedantic \
        -I"$prefix/include" -x c -fsyntax-only - || fail "$relative is not C99 on its own" ;;
  esac
  echo "#include \"$relative\"" | g++ -std=c++17 -Wall -Wextra -Werror -pedantic \
    -I"$prefix/include" -x c++ -fsyntax-only - || fail "$relative does not compile on its own"
done < <(find "$prefix/include/chorus" -name '*.h')

[ "$failed" -eq 0 ] && echo "PASS: abi hygiene of libchorus.so.$major and libchorus.a"
exit "$failed"
