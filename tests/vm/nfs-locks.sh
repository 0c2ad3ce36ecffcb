#!/bin/bash
# Runs inside the rxe VM (scripts/rxe-vm), from tests/vm/verbs-suites.sh:
# tern-nfsd found the way clients find NFS servers — through rpcbind — and
# its lock manager as the kernel's NFS client uses it:
#   - rpcinfo -p lists MOUNT (tcp, udp) and NLM (tcp, udp); showmount -e
#     lists the export;
#   - the kernel client mounts with neither port= nor mountport= nor nolock
#     (NFS on 20049, the port proto=rdma defaults to; MOUNT on a port only
#     rpcbind knows);
#   - flock(1) locks, which the NFS client sends to the server as
#     whole-file NLM locks, exclude each other across two mounts (separate
#     superblocks, nosharecache: nothing local can exclude them) and are
#     free again once released; tern-nfsd's counters show the grants and
#     the denial;
#   - a lock held through the kernel client survives a restart of tern-nfsd
#     alone: the new tern-nfsd tells the client's statd (SM_NOTIFY), statd
#     calls the kernel's lockd back, the kernel reclaims the lock within
#     the grace period (tern-nfsd counts it: reclaimed=1), and another
#     mount's process is still refused it after the grace period;
#   - after SIGTERM tern-nfsd's registrations are gone.
# Client and server share one kernel here, whose lockd (started by the
# first mount without nolock) registers NLM with the same rpcbind;
# tern-nfsd is restarted after the mount so that its registration is the
# one the client's lockd finds (docs/nfs-gateway.md, "One lock manager per
# host"). The one statd serves both sides: the kernel's lockd monitors the
# server with NLM version 3 as its callback, which tern-nfsd does not
# register, so statd's call after SM_NOTIFY reaches the kernel's lockd.
# Exit status 0 only if every check passed.
#   tests/vm/nfs-locks.sh BUILDDIR
set -uo pipefail
build=$(cd "${1:?usage: nfs-locks.sh BUILDDIR}" && pwd)
addr=169.254.77.1
backing=/srv/tern-locks state=/var/lib/tern-nfsd-locks mnt=/mnt/tern-locks mnt2=/mnt/tern-locks2
log=/tmp/tern-nfsd-locks.log
srv=
declare -a summary=()
fails=0

say() { echo "nfs-locks: $*"; }
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then summary+=("ok      $name"); else summary+=("FAILED  $name"); fails=$((fails + 1)); fi
}
start_server() {  # start_server NTH-START [GRACE]
  "$build/apps/tern-nfsd" --export "$backing" --name /locks --addr $addr --port 20049 --mount-port 0 \
    --nlm-grace "${2:-0}" --no-root-squash --state-dir "$state" >>"$log" 2>&1 &
  srv=$!
  for _ in $(seq 200); do
    [[ $(grep -c 'tern-nfsd: serving' "$log") -ge $1 ]] && return 0
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
  done
  say "tern-nfsd did not start:"
  tail -5 "$log"
  return 1
}
stop_server() {
  [[ -n $srv ]] || return 0
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  srv=
}
until_log() {  # until_log PATTERN SECONDS: the log has a line with PATTERN
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do grep -q "$1" "$log" && return 0; sleep 0.2; done
  return 1
}
until_nlm() {  # until_nlm FIELD VALUE SECONDS: tern-nfsd's NLM counter FIELD reaches VALUE
  local end=$((SECONDS + $3)) n
  while ((SECONDS < end)); do
    n=$(grep -c 'tern-nfsd: nlm:' "$log")
    kill -USR1 "$srv"
    while ((SECONDS < end)) && (($(grep -c 'tern-nfsd: nlm:' "$log") == n)); do sleep 0.1; done
    grep 'tern-nfsd: nlm:' "$log" | tail -1 | tr ' ' '\n' | grep -qx "$1=$2" && return 0
    sleep 0.5
  done
  return 1
}
registered() {  # registered PROG PROTO: rpcinfo -p has it
  rpcinfo -p 127.0.0.1 | awk -v p="$1" -v t="$2" '$1 == p && $3 == t { f = 1 } END { exit !f }'
}

mkdir -p "$backing" "$mnt" "$mnt2" /var/lib/nfs/sm /var/lib/nfs/sm.bak /run/rpcbind
mountpoint -q "$backing" || mount -t tmpfs -o mode=0777,size=64m tmpfs "$backing"
rm -rf "$state" "${backing:?}"/* /tmp/nfs-locks.*
: >"$log"
pgrep -x rpcbind >/dev/null || rpcbind -w
pgrep -x rpc.statd >/dev/null || rpc.statd
t0=$(date +%s)
# The kernel's nfsd, when an earlier suite started it, holds rdma 20049 (the
# port this tern-nfsd needs) and its rpc.mountd holds MOUNT's registration:
# both go here; kernel-nfsd-start brings them back for the suites after.
rpc.nfsd 0 >/dev/null 2>&1 || true
pkill -x rpc.mountd 2>/dev/null || true

start_server 1 || exit 1
check "rpcinfo -p lists MOUNT over tcp and udp" bash -c "$(declare -f registered); registered 100005 tcp && registered 100005 udp"
check "rpcinfo -p lists NLM over tcp and udp" bash -c "$(declare -f registered); registered 100021 tcp && registered 100021 udp"
check "showmount -e lists the export" bash -c "showmount -e $addr | grep -q '^/locks '"
say "rpcbind on NFS over RDMA: $(rpcinfo 127.0.0.1 | awk '$1 == 100003 && $3 ~ /^rdma/' | head -2 | tr -s ' ' | tr '\n' ';')"
say "$(grep 'tern-nfsd: serving' "$log" | tail -1 | grep -o 'MOUNT tcp.*registered')"
check "mount without port=, mountport= or nolock" \
  mount -t nfs -o vers=3,proto=rdma,hard $addr:/locks "$mnt"
check "a second mount of the same export (nosharecache)" \
  mount -t nfs -o vers=3,proto=rdma,hard,nosharecache $addr:/locks "$mnt2"
# The mount started the kernel's lockd, which took NLM's registration:
# restarting tern-nfsd takes it back.
stop_server
start_server 2 || exit 1
nlm_port=$(grep 'tern-nfsd: serving' "$log" | tail -1 | sed -n 's/.*NLM tcp+udp :\([0-9]*\).*/\1/p')
check "NLM over tcp is tern-nfsd's (port $nlm_port)" \
  bash -c "rpcinfo -p 127.0.0.1 | awk '\$1 == 100021 && \$2 == 4 && \$3 == \"tcp\" { print \$4 }' | grep -qx '$nlm_port'"
touch "$mnt/lockfile"
flock -x "$mnt/lockfile" -c "touch /tmp/nfs-locks.held; while [ ! -e /tmp/nfs-locks.release ]; do sleep 0.1; done" &
holder=$!
for _ in $(seq 300); do [[ -e /tmp/nfs-locks.held ]] && break; kill -0 $holder 2>/dev/null || break; sleep 0.1; done
check "the first mount's process holds the lock" test -e /tmp/nfs-locks.held
check "the second mount's process cannot take it (flock -n fails)" bash -c "! flock -n -x '$mnt2/lockfile' true"
check "nor a shared one" bash -c "! flock -n -s '$mnt2/lockfile' true"
touch /tmp/nfs-locks.release
wait $holder
check "once released, the second mount takes it" flock -n -x "$mnt2/lockfile" true

# tern-nfsd alone restarts while the first mount's process holds the lock.
grace=12
rm -f /tmp/nfs-locks.held /tmp/nfs-locks.release
flock -x "$mnt/lockfile" -c "touch /tmp/nfs-locks.held; while [ ! -e /tmp/nfs-locks.release ]; do sleep 0.1; done" &
holder=$!
for _ in $(seq 300); do [[ -e /tmp/nfs-locks.held ]] && break; kill -0 $holder 2>/dev/null || break; sleep 0.1; done
check "the first mount's process holds the lock again" test -e /tmp/nfs-locks.held
t1=$(date +%s)
stop_server
nlm=$(grep 'tern-nfsd: nlm:' "$log" | tail -1)
say "before the restart: $nlm"
field() { echo "$nlm" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
check "the locks went through tern-nfsd's NLM (granted >= 3, denied >= 2)" \
  test "$(field granted)" -ge 3 -a "$(field denied)" -ge 2
check "the record names the client and the address it locked through" \
  grep -qx "holder $addr $addr" "$state/nlm-holders"
start_server 3 $grace || exit 1
t2=$(date +%s)  # the grace period ends by t2 + grace
say "$(grep 'tern-nfsd: serving' "$log" | tail -1 | grep -o 'NLM tcp.*registered')"
check "tern-nfsd told the client's statd to reclaim (SM_NOTIFY)" until_log "SM_NOTIFY to $addr: told" 20
grep "SM_NOTIFY to" "$log" | tail -1 | sed 's/^/    /'
check "the kernel client reclaimed its lock within grace (reclaimed=1)" until_nlm reclaimed 1 $grace
say "reclaimed $(($(date +%s) - t1)) s after the stop: $(grep 'tern-nfsd: nlm:' "$log" | tail -1)"
while (($(date +%s) <= t2 + grace)); do sleep 0.5; done
check "after grace, the second mount's process is still refused the lock" bash -c "! flock -n -x '$mnt2/lockfile' true"
touch /tmp/nfs-locks.release
wait $holder
check "once released, the second mount takes it" flock -n -x "$mnt2/lockfile" true
say "the restart check took $(($(date +%s) - t1)) s"
umount "$mnt2"
umount "$mnt"
stop_server
nlm=$(grep 'tern-nfsd: nlm:' "$log" | tail -1)
say "$nlm"
check "nothing was left behind (locks_held=0)" test "$(field locks_held)" -eq 0
check "after SIGTERM, MOUNT and NLM are unregistered" \
  bash -c "$(declare -f registered); ! registered 100005 tcp && ! registered 100005 udp && ! registered 100021 tcp"
say "took $(($(date +%s) - t0)) s"

echo "--- nfs-locks (rpcbind and NLM through the kernel's NFS/RDMA client):"
printf '    %s\n' "${summary[@]}"
if ((fails > 0)); then
  echo "--- the end of tern-nfsd's log:"
  tail -30 "$log"
fi
exit $((fails > 0))
