# shellcheck shell=bash
# What the app tests share; each sources it after `set -euo pipefail`:
#   . "$(dirname "$0")/lib.sh"
# so that it still runs alone, by its path, as meson runs it.
#
# fail MESSAGE: says why on stderr and exits 1.
# scratch NAME [PARENT]: $dir, a fresh directory PARENT/tern-NAME.XXXXXX
#   (PARENT /tmp unless given).
# At exit, whatever the test started in the background and has not waited
# for (the shell's jobs: no list of pids to keep) is killed, with
# $cleanup_signal (TERM unless the test sets it: KILL for a server whose
# graceful stop the test does not need) and waited for, and $dir removed.
fail() { echo "FAIL: $*" >&2; exit 1; }

dir=
cleanup_signal=TERM
scratch() { dir=$(mktemp -d "${2:-/tmp}/tern-$1.XXXXXX"); }

cleanup() {
  local p
  for p in $(jobs -p); do kill -"$cleanup_signal" "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -z $dir ]] || rm -rf "$dir"
}
trap cleanup EXIT
