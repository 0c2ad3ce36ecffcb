#!/usr/bin/env bash
# TERN_LOG_LEVEL=bogus (issue 24): every shipped program says it in one line
# and exits 2 (a usage error); it used to print "logging at warn" and then
# exit (tern-nfsd), or go on (tern-perf, tern-nfs-read).
#   log_level_consistent.sh TERN-NFSD TERN-PERF TERN-NFS-READ
set -uo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
dir=$(mktemp -d /tmp/tern-loglevel.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/export"
check() {  # check NAME ARGS...
  local name=$1
  shift
  out=$(TERN_LOG_LEVEL=bogus timeout 20 "$@" 2>&1 >/dev/null)
  rc=$?
  [[ $rc == 2 ]] || fail "$name: exit $rc: $out"
  [[ $(grep -c . <<<"$out") -le 2 && $out == *"TERN_LOG_LEVEL='bogus' is not a log level"* ]] || fail "$name said: $out"
  [[ $out != *"logging at"* ]] || fail "$name says it goes on, then stops: $out"
}
check tern-nfsd "$1" --export "$dir/export" --listen "shm:path=$dir/s" --state-dir "$dir/state" --mount-port off --no-rpcbind
check tern-perf "$2" client --dev "shm:path=$dir/p" -n 10
check tern-nfs-read "$3" --server x --dev "shm:path=$dir/r" --path /f
echo "ok: one line and exit 2 from each"
