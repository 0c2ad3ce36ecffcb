#!/usr/bin/env bash
# A C++17 consumer of Tern's C++ headers gets one clear error naming C++20
# (lib/base/cxx20.h), before any raw std::span error; the C API's header
# still compiles as C++11.
#   cxx17_error.sh SOURCE_ROOT BUILD_ROOT CXX...
set -uo pipefail
src=$1 bld=$2
shift 2
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d /tmp/tern-cxx17.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf '#include "engine/engine.h"\nint main() { return 0; }\n' >"$tmp/a.cc"
out=$("$@" -std=c++17 -I"$src/lib" -I"$src/pmd" -I"$bld" -I"$bld/lib" -fsyntax-only "$tmp/a.cc" 2>&1)
[[ $? != 0 ]] || fail "engine.h compiled as C++17"
first=$(grep -m1 "error" <<<"$out")
[[ $first == *"Tern's C++ headers need C++20: compile with -std=c++20"* ]] || fail "the first error: $first"
printf '#include "tern/tern.h"\nint main() { return 0; }\n' >"$tmp/c.cc"
"$@" -std=c++11 -I"$src/include" -fsyntax-only "$tmp/c.cc" || fail "tern.h as C++11"
echo "ok: C++17 gets: $first"
