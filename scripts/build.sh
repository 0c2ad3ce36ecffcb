#!/usr/bin/env bash
# Configures (once) and builds one Tern build directory.
#   scripts/build.sh DIR [meson options...]
# Re-running is cheap: meson reconfigures only when options change.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
cd "$top"
if [[ ! -f "$dir/build.ninja" ]]; then
  meson setup "$dir" "$@" >/dev/null
else
  # Apply the requested options to an existing directory (no-op when equal).
  [[ $# -gt 0 ]] && meson configure "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
