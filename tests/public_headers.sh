#!/usr/bin/env bash
# public_headers.sh BUILD_DIR SOURCE_DIR: every public header compiles alone, as C11 and as C++17,
# under gcc and clang, with the warnings a careful user turns on (-Wall -Wextra -Wpedantic, and
# for C++ -Wold-style-cast -Wzero-as-null-pointer-constant, -Wuseless-cast under g++), as errors;
# then every annotation macro is used once in C (tests/probes/headers_use.c) and in C++
# (tests/probes/headers_use.cpp) under the same flags. A compiler that is missing is skipped and
# named; with none at all the test exits 77.
set -uo pipefail
src=$2
inc=$src/include
common=(-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wcast-qual -Wundef -Werror)
cflags=(-std=c11 "${common[@]}" -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings)
cxxflags=(-std=c++17 "${common[@]}" -Wold-style-cast -Wzero-as-null-pointer-constant)
headers=$(cd "$inc" && ls loupe/*.h loupe/detail/*.h)
fail=0 ran=0
check() { # label, compiler, flags..., -- file
  local label=$1; shift
  if ! out=$("$@" 2>&1); then
    echo "FAIL: $label"
    echo "$out" | head -20
    fail=1
  fi
  ran=$((ran + 1))
}
for pair in "gcc g++" "clang clang++"; do
  set -- $pair
  cc=$1 cxx=$2
  if ! command -v "$cc" >/dev/null || ! command -v "$cxx" >/dev/null; then
    echo "public_headers: $cc/$cxx not installed: not checked"
    continue
  fi
  extra=()
  [ "$cxx" = g++ ] && extra=(-Wuseless-cast)
  for h in $headers; do
    check "$h alone, $cc C11" "$cc" "${cflags[@]}" -I"$inc" -fsyntax-only -x c - <<<"#include <$h>
typedef int loupe_headers_tu;"
    check "$h alone, $cxx C++17" "$cxx" "${cxxflags[@]}" "${extra[@]}" -I"$inc" -fsyntax-only \
      -x c++ - <<<"#include <$h>
typedef int loupe_headers_tu;"
  done
  check "headers_use.c, $cc" "$cc" "${cflags[@]}" -I"$inc" -fsyntax-only "$src/tests/probes/headers_use.c"
  check "headers_use.cpp, $cxx" "$cxx" "${cxxflags[@]}" "${extra[@]}" -I"$inc" -fsyntax-only \
    "$src/tests/probes/headers_use.cpp"
  check "examples/cpp_zones.cpp, $cxx" "$cxx" "${cxxflags[@]}" "${extra[@]}" -I"$inc" -fsyntax-only \
    "$src/examples/cpp_zones.cpp"
  # README.md's C++ example, as a user pastes it (with the function it calls declared)
  readme_cpp=$( { echo 'void compute(); void train();'; \
    sed -n '/^```cpp$/,/^```$/p' "$src/README.md" | sed '1d;$d'; } )
  check "README.md's C++ example, $cxx" "$cxx" "${cxxflags[@]}" "${extra[@]}" -I"$inc" \
    -fsyntax-only -x c++ - <<<"$readme_cpp"
done
if [ "$ran" = 0 ]; then
  echo "public_headers: SKIPPED: neither gcc nor clang is installed"
  exit 77
fi
[ "$fail" = 0 ] && echo "public_headers: $ran compilations clean"
exit "$fail"
