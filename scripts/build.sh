#!/usr/bin/env bash
# Configures (once) and builds one Tern build directory.
#   scripts/build.sh DIR [meson options...] [-- ninja targets...]
# Re-running is cheap: meson reconfigures only when options change. Targets
# after `--` build only those and what they need (scripts/fuzz.sh: the fuzz
# targets, not the libraries nothing there links); none: everything.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
opts=() targets=()
while (($# > 0)); do
  if [[ $1 == -- ]]; then shift; targets=("$@"); break; fi
  opts+=("$1")
  shift
done
set -- "${opts[@]+"${opts[@]}"}"
cd "$top"
if [[ ! -f "$dir/build.ninja" ]]; then
  meson setup "$dir" "$@" >/dev/null
else
  # Apply the requested options to an existing directory (no-op when equal).
  # An option the directory has not seen yet (meson_options.txt grew since
  # it was configured) needs a reconfigure first, which also applies them.
  if [[ $# -gt 0 ]] && ! meson configure "$dir" "$@" >/dev/null 2>&1; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  fi
fi
ninja -C "$dir" "${targets[@]+"${targets[@]}"}" >/dev/null
