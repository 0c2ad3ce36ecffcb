#!/usr/bin/env bash
# Installs a Tern build into a scratch directory and builds programs from
# outside the tree against it, with nothing but pkg-config, shared and static:
#   tests/install/check-install.sh [options] BUILDDIR PROGRAM...
# PROGRAM is FILE or FILE@PKG (default package: tern); FILE.cc is compiled as
# C++20, FILE.c as C11. Each is linked twice and run each time:
#   shared: `pkg-config --cflags --libs PKG`, run against the installed .so;
#   static: `pkg-config --static --cflags --libs PKG` in a copy of the install
#           without any libtern*.so, and checked not to need one.
# Then every installed header is compiled on its own as <tern/...> with only
# `pkg-config --cflags tern` (C++20; the --c-header ones also as C11), which
# also catches a public header that includes one not installed; and none may
# compile unprefixed ("base/result.h"): only <prefix>/include is on the path.
# Options:
#   --c-header NAME    an installed header that must also compile as C
#   --no-rdma          this build was configured -Dverbs=disabled -Dmlx5=disabled
#                      -Deal=disabled: check that nothing of rdma-core or DPDK is
#                      named by the .pc files, the libraries, the installed
#                      headers or the build rules, nor read by the compiler
# Compilers: $CXX (default c++) and $CC (default cc).
set -euo pipefail

c_headers=()
no_rdma=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --c-header) c_headers+=("$2"); shift 2 ;;
    --no-rdma) no_rdma=1; shift ;;
    *) echo "check-install: unknown option $1" >&2; exit 2 ;;
  esac
done
build=$(cd "${1:?usage: check-install.sh [options] BUILDDIR PROGRAM...}" && pwd)
shift
read -r -a cxx <<<"${CXX:-c++}"
read -r -a cc <<<"${CC:-cc}"

scratch=$(mktemp -d /tmp/tern-install.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }

# A DESTDIR install, whose .pc files then get the scratch prefix, as if the
# build had been configured with --prefix there.
meson install -C "$build" --no-rebuild --quiet --destdir "$scratch/root" >/dev/null
pc=$(find "$scratch/root" -name tern.pc -print -quit)
[[ -n $pc ]] || fail "no tern.pc installed"
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
prefix=$(sed -n 's/^prefix=//p' "$pc")
sed -i "s|^prefix=.*|prefix=$scratch/root$prefix|" "$pcdir"/*.pc
echo "installed: $(cd "$scratch/root" && find . -name 'libtern*' -o -name '*.pc' | sort | tr '\n' ' ')"
echo "           $(find "$scratch/root" -name '*.h' | wc -l) headers under $(cd "$scratch/root" && find . -type d -name tern -path '*include*')"

# The static view: the same tree without shared libraries, so that -ltern can
# only mean libtern.a.
cp -a "$scratch/root" "$scratch/static"
find "$scratch/static" -name 'libtern*.so*' -delete
sed -i "s|^prefix=$scratch/root|prefix=$scratch/static|" "$scratch/static${pcdir#"$scratch/root"}"/*.pc

pkgconf() {  # pkgconf ROOT ARGS...
  local root=$1
  shift
  PKG_CONFIG_PATH="$root${pcdir#"$scratch/root"}${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config "$@"
}
echo "pkg-config --cflags --libs tern:          $(pkgconf "$scratch/root" --cflags --libs tern)"
echo "pkg-config --static --cflags --libs tern: $(pkgconf "$scratch/root" --static --cflags --libs tern)"
[[ $(pkgconf "$scratch/root" --modversion tern) == "$(meson introspect "$build" --projectinfo | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" ]] ||
  fail "tern.pc version differs from the project's"

compile() {  # compile OUT SRC FLAGS...
  local out=$1 src=$2
  shift 2
  case $src in
    *.c) "${cc[@]}" -std=c11 -Wall -Wextra -o "$out" "$src" "$@" ;;
    *) "${cxx[@]}" -std=c++20 -Wall -Wextra -o "$out" "$src" "$@" ;;
  esac
}

for prog in "$@"; do
  src=${prog%@*}
  pkg=tern
  [[ $prog == *@* ]] && pkg=${prog#*@}
  [[ -f $src ]] || fail "$src: no such file"
  name=$(basename "${src%.*}")

  # shellcheck disable=SC2046  # pkg-config output is a list of flags
  compile "$scratch/$name-shared" "$src" $(pkgconf "$scratch/root" --cflags --libs "$pkg")
  readelf -d "$scratch/$name-shared" | grep -q 'NEEDED.*libtern' || fail "$name-shared does not use libtern.so"
  out=$(LD_LIBRARY_PATH="$libdir" "$scratch/$name-shared") || fail "$name (shared) exited non-zero"
  echo "--- $name (shared, $pkg): $out"

  # shellcheck disable=SC2046
  compile "$scratch/$name-static" "$src" $(pkgconf "$scratch/static" --static --cflags --libs "$pkg")
  ! readelf -d "$scratch/$name-static" | grep -q 'NEEDED.*libtern' || fail "$name-static needs a libtern .so"
  out=$("$scratch/$name-static") || fail "$name (static) exited non-zero"
  echo "--- $name (static, $pkg): $out"
done

version=$(pkgconf "$scratch/root" --modversion tern)
while IFS= read -r app; do
  [[ $("$app" --version) == "$(basename "$app") $version" ]] || fail "$app --version: $("$app" --version)"
  echo "--- $(basename "$app") --version: $("$app" --version)"
done < <(find "$scratch/root" -path '*/bin/tern-*' -type f | sort)

n=0
cflags=$(pkgconf "$scratch/root" --cflags tern)
inc=$(find "$scratch/root" -type d -path '*include/tern' -print -quit)
# Users include <tern/area/x.h>, with nothing but <prefix>/include on their
# path: the generic folder names under it (base/, mem/, engine/, ...) must
# not be includable on their own, where they would shadow or be shadowed
# by a user's own "base/..." headers.
for f in $(pkgconf "$scratch/root" --cflags-only-I tern tern-runtime); do
  [[ ${f#-I} == "$inc" ]] && fail "pkg-config puts $inc on the include path (-I$inc): use <tern/...> from -I${inc%/tern}"
done
# One compiler per core: each header is two compiler runs of its own, and
# the whole loop, one after another, was most of this test's time with the
# machine's other core idle (meson runs it alone).
check_header() {  # check_header REL: compiles on its own, unreachable without tern/
  local rel=$1 src
  src=$(mktemp "$scratch/one.XXXXXX.cc")
  printf '#include <tern/%s>\n#include <tern/%s>\n' "$rel" "$rel" >"$src"
  # shellcheck disable=SC2086 # words: the compiler and its flags
  $cxx_words -std=c++20 -Wall -Wextra -Werror -fsyntax-only $cflags "$src" || {
    echo "check-install: FAILED: installed <tern/$rel> does not compile on its own (C++20)" >&2
    return 1
  }
  if [[ $rel == */* ]]; then
    printf '#include "%s"\n' "$rel" >"$src"
    # shellcheck disable=SC2086
    if $cxx_words -std=c++20 -fsyntax-only $cflags "$src" 2>/dev/null; then
      echo "check-install: FAILED: a user can #include \"$rel\" without tern/: pkg-config --cflags tern exposes $inc" >&2
      return 1
    fi
  fi
}
export -f check_header
export scratch cflags inc
cxx_words="${cxx[*]}"
export cxx_words
mapfile -t headers < <(find "$inc" -name '*.h' | sort | sed "s|^$inc/||")
n=${#headers[@]}
# shellcheck disable=SC2016 # $1 is the inner shell's
printf '%s\n' "${headers[@]}" | xargs -d '\n' -P "$(nproc)" -n 1 bash -c 'check_header "$1"' _ ||
  fail "installed headers (above)"
for rel in "${c_headers[@]}"; do
  [[ $rel == tern/* ]] || rel=tern/$rel  # names from tests/headers: relative to lib/ or include/
  printf '#include <%s>\n' "$rel" >"$scratch/one.c"
  # shellcheck disable=SC2086
  "${cc[@]}" -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only $cflags "$scratch/one.c" ||
    fail "installed <$rel> does not compile on its own as C11"
done
echo "--- $n installed headers compile on their own as <tern/...> (C++20), ${#c_headers[@]} also as C11;" \
  "none is reachable without tern/"

if ((no_rdma)); then
  bad='ibverbs|rdmacm|mlx5|dpdk|rte_'
  if grep -El "$bad" "$pcdir"/*.pc; then fail ".pc files name rdma-core or DPDK"; fi
  for so in "$libdir"/libtern*.so; do
    if readelf -d "$so" | grep -E "NEEDED.*($bad)"; then fail "$(basename "$so") needs rdma-core or DPDK"; fi
  done
  if grep -rlE '#\s*include\s*<(infiniband|rdma|rte_)' "$inc"; then fail "installed headers include rdma-core or DPDK"; fi
  if grep -E -- "-l(ibverbs|rdmacm|mlx5)|librte_|dpdk" "$build/build.ninja" | head -3 | grep .; then
    fail "the build compiles or links against rdma-core or DPDK"
  fi
  # What the compiler actually read (ninja's record of every depfile).
  if ninja -C "$build" -t deps | grep -E '/(infiniband|rdma|dpdk)/|/rte_[a-z_]*\.h' | sort -u | head -3 | grep .; then
    fail "the build includes rdma-core or DPDK headers"
  fi
  echo "--- no rdma-core or DPDK in the .pc files, the libraries, the headers or the build"
fi
echo "check-install: OK"
