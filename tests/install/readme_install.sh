#!/usr/bin/env bash
# The install lines of README.md ("Installing and linking") and
# docs/install.md must work on a machine with only the library's own
# dependencies: GoogleTest and Google Benchmark are for Tern's tests and
# benchmarks (both on by default), not for an install (issue 24: the
# README's line needed both). Each line's `meson setup` is run as written
# into a scratch directory; it must configure, and never look for gtest or
# benchmark (meson's log records every dependency lookup).
#   tests/install/readme_install.sh SRCROOT
set -euo pipefail
src=$(cd "${1:?usage: readme_install.sh SRCROOT}" && pwd)
scratch=$(mktemp -d /tmp/tern-readme-install.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "readme_install: FAILED: $*" >&2; exit 1; }

n=0
for doc in README.md docs/install.md; do
  # The first indented `meson setup build ...` line of the document.
  line=$(grep -m1 -E '^    meson setup build( |$)' "$src/$doc") || fail "$doc: no '    meson setup build' line"
  line=${line#    }
  line=${line%%&&*}  # README chains ninja and meson install after it
  line=${line%%#*}
  line=${line%"${line##*[! ]}"}  # trailing blanks
  read -r -a words <<<"$line"
  opts=()
  for w in "${words[@]:3}"; do
    [[ $w == -D* || $w == --* ]] || fail "$doc: unexpected word '$w' in: $line"
    opts+=("$w")
  done
  dir=$scratch/b$n
  meson setup "$dir" "$src" "${opts[@]}" >"$scratch/setup$n.log" 2>&1 ||
    fail "$doc: '$line' does not configure: $(tail -5 "$scratch/setup$n.log")"
  if grep -E -i '^(Run-time )?dependency (gtest|benchmark)' "$dir/meson-logs/meson-log.txt"; then
    fail "$doc: '$line' needs GoogleTest or Google Benchmark (add -Dtests=false -Dbenchmarks=false)"
  fi
  echo "ok: $doc: $line"
  n=$((n + 1))
done
