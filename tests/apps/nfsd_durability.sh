#!/usr/bin/env bash
# Durability before the reply, tern-nfsd as a child process over pmd/shm: a
# FILE_SYNC WRITE (nfsd-probe's "write": 'X' at offset 0) is answered, and
# tern-nfsd is killed with SIGKILL right after that answer; the data is in
# the file, and a restarted tern-nfsd on the same state directory serves
# it under the same handle. The WRITE goes through the storage queue and is
# answered from its completion (docs/nfs-gateway.md, "Storage off the
# engine's thread"): a reply sent before the operation ran would lose it.
# (A SIGKILL cannot tell the page cache from the disk -- that takes a
# machine crash; what it shows is that nothing answered is left undone.)
# Needs root (open_by_handle_at); says so and passes without it.
# nfsd_crash_durability.sh checks the sync itself, across a simulated
# power cut of the exported file system.
set -euo pipefail
nfsd=$1
probe=$2
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
if [[ $(id -u) != 0 ]]; then
  echo "nfsd_durability: needs root (open_by_handle_at): not run"
  exit 0
fi
scratch nfsd-durable /var/tmp
cleanup_signal=KILL
mkdir "$dir/export" "$dir/state"
printf 'abc' >"$dir/export/f"
printf '%s localhost(rw,no_root_squash)\n' "$dir/export" >"$dir/exports"

start() {  # start NAME: tern-nfsd with its log in $dir/NAME.log; sets $srv, $mport
  local log=$dir/$1.log
  "$nfsd" --exports "$dir/exports" --listen "shm:path=$dir/s" --state-dir "$dir/state" \
    --mount-port 0 --mount-addr 127.0.0.1 >"$log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do
    grep -q "tern-nfsd: serving" "$log" && break
    kill -0 "$srv" 2>/dev/null || fail "tern-nfsd exited: $(cat "$log")"
    sleep 0.1
  done
  mport=$(sed -n 's/.*MOUNT tcp 127.0.0.1:\([0-9]*\);.*/\1/p' "$log")
  [[ -n $mport ]] || fail "no MOUNT port: $(cat "$log")"
}

start first
# One probe, the write and the kill in one go: the kill follows the answer.
out=$(printf 'mnt 127.0.0.1 %s %s\n' "$mport" "$dir/export" | timeout 60 "$probe")
root=$(awk '{print $3}' <<<"$out")
[[ $root != - && -n $root ]] || fail "MNT: $out"
coproc PROBE { "$probe"; }
ask() {
  echo "$*" >&"${PROBE[1]}"
  local r
  read -r -t 30 -u "${PROBE[0]}" r || fail "nfsd-probe did not answer '$*'"
  echo "$r"
}
[[ $(ask connect "shm:path=$dir/s") == "connect ok" ]] || fail "no connection"
read -r _ st fh < <(ask lookup "$root" f)
[[ $st == 0 ]] || fail "LOOKUP f: $st"
got=$(ask write "$fh")
kill -KILL "$srv"
[[ $got == "write 0" ]] || fail "WRITE FILE_SYNC: '$got'"
wait "$srv" 2>/dev/null || true
[[ $(head -c 1 "$dir/export/f") == X ]] || fail "the answered FILE_SYNC WRITE is not in the file: $(od -c "$dir/export/f")"

# The next instance: same handles, same data.
start second
out=$(printf 'mnt 127.0.0.1 %s %s\nconnect shm:path=%s/s\nlookup %s f\ngetattr %s\n' \
  "$mport" "$dir/export" "$dir" "$root" "$fh" | timeout 60 "$probe")
grep -q "^lookup 0 $fh$" <<<"$out" || fail "after the restart: $out"
grep -q "^getattr 0$" <<<"$out" || fail "after the restart: $out"
[[ $(cat "$dir/export/f") == Xbc ]] || fail "after the restart: $(cat "$dir/export/f")"
kill -TERM "$srv"
wait "$srv" || fail "SIGTERM: exit $?"
echo "nfsd_durability: ok"
