#!/bin/bash
# Runs inside the rxe VM (scripts/rxe-vm), from tests/vm/verbs-suites.sh:
# tern-nfsd mounted by the Linux kernel's own NFS/RDMA client (xprtrdma),
# and ordinary file work on it, checked against the exported directory:
#   - a tree copied in and out, a tar extracted, ls -lR, rename, symlink
#     (a 4000-byte one too: its path in a read chunk, READLINK's through a
#     reply chunk), hard link, chmod, rm -r; 64 MiB written and read back,
#     checksums compared with the backing directory's;
#   - fio with --verify: random 4 KiB writes and reads at depth 16,
#     sequential 1 MiB writes and reads (a few seconds each);
#   - the transport as the kernel client used it (its mountstats): read
#     chunks, write chunks, reply chunks; tern-nfsd's Sends With Invalidate;
#   - nconnect=4 over two engines: the connections spread over both;
#   - recovery: tern-nfsd killed (-9) during a verified fio run on a hard
#     mount and started again: the client reconnects, retransmits, fio
#     finishes with its verification passing; and a MKDIR whose reply the
#     dead server had recorded but not sent is answered, on its
#     retransmission, from the reply cache file by the next server
#     (counted), not made twice.
# Exit status 0 only if every check passed; a summary at the end.
#   tests/vm/nfs-gateway.sh BUILDDIR
set -uo pipefail
build=$(cd "${1:?usage: nfs-gateway.sh BUILDDIR}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
addr=169.254.77.1 port=20050 mport=20048
backing=/srv/tern-export state=/var/lib/tern-nfsd-test mnt=/mnt/tern
log=/tmp/tern-nfsd.log
srv=
declare -a summary=()
fails=0

say() { echo "nfs-gateway: $*"; }
check() {  # check NAME COMMAND...: records ok/FAILED
  local name=$1
  shift
  if "$@"; then summary+=("ok      $name"); else summary+=("FAILED  $name"); fails=$((fails + 1)); fi
}

start_server() {  # start_server [tern-nfsd options...]
  "$build/apps/tern-nfsd" --no-rpcbind --nlm-port off --export "$backing" --name /export --addr $addr --port $port --mount-port $mport \
    --no-root-squash --state-dir "$state" "$@" >>"$log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/$addr/$mport) 2>/dev/null && return 0
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
  done
  say "tern-nfsd did not start:"
  tail -5 "$log"
  return 1
}
stop_server() {  # SIGTERM: it prints its counters
  [[ -n $srv ]] || return 0
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  srv=
}
last_stats() { grep 'tern-nfsd: stats:' "$log" | tail -1; }
stat_of() { last_stats | tr ' ' '\n' | sed -n "s/^$1=//p"; }
do_mount() {  # do_mount [extra options]
  mount -t nfs -o "vers=3,proto=rdma,port=$port,mountport=$mport,mountproto=tcp,nolock,hard${1:+,$1}" \
    $addr:/export "$mnt"
}
# The kernel client's counters for this mount (xprtrdma's "xprt: rdma" line):
# fields 11.. are read, write and reply chunks, ..., long (RDMA_NOMSG) calls.
xprt_field() { awk -v f="$1" '$1 == "xprt:" && $2 == "rdma" { s += $(f + 2) } END { print s + 0 }' /proc/self/mountstats; }

mkdir -p "$backing" "$mnt" /tmp/nfsgw
mountpoint -q "$backing" || mount -t tmpfs -o mode=0777,size=1200m tmpfs "$backing"
rm -rf "$state" "${backing:?}"/*
: >"$log"

# ---------------------------------------------------------------- file work
start_server --engines 2 || exit 1
if ! do_mount; then
  say "mount failed"
  tail -20 "$log"
  exit 1
fi
say "mounted: $(grep " $mnt " /proc/mounts)"
src=$top/lib
tar -C "$top" -cf /tmp/nfsgw/lib.tar lib
check "copy a tree in (cp -a), identical in the export" \
  bash -c "cp -a '$src' '$mnt/tree' && diff -r '$src' '$mnt/tree' && diff -r '$src' '$backing/tree'"
check "copy it out again, identical" bash -c "cp -a '$mnt/tree' /tmp/nfsgw/out && diff -r '$src' /tmp/nfsgw/out"
check "tar extract, identical" \
  bash -c "mkdir '$mnt/x' && tar -C '$mnt/x' -xf /tmp/nfsgw/lib.tar && diff -r '$src' '$mnt/x/lib' && diff -r '$src' '$backing/x/lib'"
lsr() { (cd "$1" && ls -lRn --time-style=+%s . | grep -v '^total '); }
check "ls -lR of the mount is the export's" bash -c "$(declare -f lsr); diff <(lsr '$mnt') <(lsr '$backing')"
check "rename a file and a directory" \
  bash -c "mv '$mnt/tree/base' '$mnt/tree/base2' && mv '$mnt/x/lib/engine/engine.h' '$mnt/x/lib/engine.h' &&
           [[ -d '$backing/tree/base2' && ! -e '$backing/tree/base' && -f '$backing/x/lib/engine.h' ]]"
check "symlink" bash -c "ln -s ../tree/base2/log.h '$mnt/x/link' && [[ \$(readlink '$backing/x/link') == ../tree/base2/log.h ]] &&
           cmp '$mnt/x/link' '$src/base/log.h'"
long=$(head -c 4000 /dev/zero | tr '\0' 'L' | sed 's/L\{99\}/&\//g')
check "a symlink with a 4000-byte target (its path in a read chunk), read back" \
  bash -c "ln -s '$long' '$mnt/x/longlink' && echo 3 >/proc/sys/vm/drop_caches &&
           [[ \$(readlink '$mnt/x/longlink') == '$long' && \$(readlink '$backing/x/longlink') == '$long' ]]"
check "hard link" bash -c "ln '$mnt/tree/base2/log.h' '$mnt/x/hard' &&
           [[ \$(stat -c %i '$backing/x/hard') == \$(stat -c %i '$backing/tree/base2/log.h') && \$(stat -c %h '$mnt/x/hard') == 2 ]]"
check "chmod" bash -c "chmod 0640 '$mnt/x/hard' && chmod 0700 '$mnt/x' &&
           [[ \$(stat -c %a '$backing/x/hard') == 640 && \$(stat -c %a '$backing/x') == 700 ]]"
check "rm -r" bash -c "rm -r '$mnt/tree' '$mnt/x' && [[ -z \$(ls -A '$backing') && -z \$(ls -A '$mnt') ]]"
head -c 64M /dev/urandom >/tmp/nfsgw/big
want=$(md5sum </tmp/nfsgw/big)
check "64 MiB written; the export's checksum is the source's" \
  bash -c "cp /tmp/nfsgw/big '$mnt/big' && sync && [[ \$(md5sum <'$backing/big') == '$want' ]]"
check "64 MiB read back (caches dropped); the same checksum" \
  bash -c "echo 3 >/proc/sys/vm/drop_caches && [[ \$(md5sum <'$mnt/big') == '$want' ]]"
rm -f "$mnt/big" /tmp/nfsgw/big

# fio, verified. A few seconds each: this is about correctness under
# concurrency; scripts/measure-nfs.sh measures.
fio_job() {  # fio_job NAME fio-options...
  local name=$1
  shift
  fio --name="$name" --directory="$mnt" --ioengine=libaio --direct=1 --group_reporting --verify_state_save=0 \
    --verify=crc32c --verify_fatal=1 --output=/tmp/nfsgw/fio-$name.txt "$@"
}
check "fio: random 4 KiB writes at depth 16, then every block read back and verified" \
  fio_job rand4k --rw=randwrite --bs=4k --iodepth=16 --size=16m --do_verify=1
check "fio: random 4 KiB reads and writes at depth 16, verified as read" \
  fio_job randrw4k --rw=randrw --bs=4k --iodepth=16 --size=16m --runtime=4 --time_based=0 --verify_backlog=256
check "fio: sequential 1 MiB writes, then read back and verified" \
  fio_job seq1m --rw=write --bs=1m --iodepth=4 --size=64m --do_verify=1
for f in /tmp/nfsgw/fio-*.txt; do grep -E "^ +(read|write):" "$f" | sed "s|^ *|    $(basename "$f" .txt): |"; done

# The transport, as the kernel client counted it.
reads=$(xprt_field 11) writes=$(xprt_field 12) replies=$(xprt_field 13) nomsg=$(xprt_field 21)
say "kernel client: $reads read-chunk segments (WRITE data), $writes write-chunk segments (READ data), $replies reply-chunk segments, $nomsg long calls, $(xprt_field 19) marshaling failures, $(xprt_field 20) bad replies, $(xprt_field 25) MRs it invalidated itself"
grep -E '^[[:space:]]+xprt:' /proc/self/mountstats | sed 's/^[[:space:]]*/    /'
check "the client sent WRITE data in read chunks and got READ data in write chunks" \
  test "$reads" -gt 0 -a "$writes" -gt 0
# (The Linux NFSv3 client never needs a long call -- RDMA_NOMSG -- at a 4
# KiB inline threshold: its only large arguments, WRITE's data and
# SYMLINK's path, go in read chunks, as the long symlink above did. The
# nfsd-functional suite sends long calls from a Tern client over rxe.)
check "the client used reply chunks (READDIRPLUS, READLINK)" test "$replies" -gt 0
check "the client found no reply it could not use" test "$(xprt_field 20)" -eq 0
umount "$mnt"
stop_server
say "$(last_stats)"
check "tern-nfsd answered Send With Invalidate and no garbage" \
  bash -c "[[ \$(grep 'tern-nfsd: stats:' '$log' | tail -1 | tr ' ' '\n' | sed -n 's/^send_with_inv=//p') -gt 0 &&
            \$(grep 'tern-nfsd: stats:' '$log' | tail -1 | tr ' ' '\n' | sed -n 's/^garbage=//p') == 0 ]]"

# ---------------------------------------------------------------- nconnect
start_server --engines 2 || exit 1
do_mount nconnect=4 || summary+=("FAILED  mount with nconnect=4")
dd if=/dev/zero of="$mnt/n" bs=1M count=8 oflag=direct status=none
kill -USR1 "$srv"
sleep 0.5
conns=$(stat_of connections)
say "nconnect=4 over 2 engines: connections per engine $conns"
check "nconnect=4: both engines hold connections" bash -c "[[ '$conns' =~ ^[1-9][0-9]*,[1-9][0-9]*$ ]]"
rm -f "$mnt/n"
umount "$mnt"
stop_server

# ---------------------------------------------------------------- who the caller is
# Root squashed (the default): root's files belong to nobody; a user's to
# the user, who alone may write them. (Each call runs as its caller on
# tern-nfsd's caller thread: an engine thread that changed its credentials
# could no longer post to rxe.)
start_server_squash() {
  "$build/apps/tern-nfsd" --no-rpcbind --nlm-port off --export "$backing" --name /export --addr $addr --port $port --mount-port $mport \
    --state-dir "$state" >>"$log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/$mport) 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
start_server_squash || exit 1
do_mount || exit 1
as_user() { setpriv --reuid="$1" --regid="$1" --clear-groups -- "${@:2}"; }
check "root squashed: root's new file belongs to nobody" \
  bash -c "echo x >'$mnt/by-root' && [[ \$(stat -c %u '$backing/by-root') == 65534 ]]"
check "a user's new file belongs to the user" \
  bash -c "$(declare -f as_user); as_user 4321 sh -c 'umask 077; echo mine >$mnt/by-user' && [[ \$(stat -c %u:%g:%a '$backing/by-user') == 4321:4321:600 ]]"
check "another user may not read or write it, nor remove a root-owned file" \
  bash -c "$(declare -f as_user); ! as_user 4322 cat '$mnt/by-user' 2>/dev/null && ! as_user 4322 sh -c 'echo x >>$mnt/by-user' 2>/dev/null &&
           mkdir '$backing/rootdir' && touch '$backing/rootdir/f' && ! as_user 4322 rm -f '$mnt/rootdir/f' 2>/dev/null &&
           [[ -e '$backing/rootdir/f' && \$(cat '$backing/by-user') == mine ]]"
rm -rf "${backing:?}"/*
umount "$mnt"
stop_server

# ---------------------------------------------------------------- recovery
# kill -9 in the middle of a verified fio run on a hard mount.
start_server --engines 2 || exit 1
do_mount || exit 1
fio_job killed --rw=randwrite --bs=4k --iodepth=16 --size=16m --do_verify=1 &
fio_pid=$!
sleep 3
kill -9 "$srv"
wait "$srv" 2>/dev/null
say "tern-nfsd killed (-9) during fio; starting it again in 1 s"
sleep 1
start_server --engines 2 || exit 1
check "fio over the kill and restart finished, its verification passing" wait "$fio_pid"
grep -E "^ +(read|write):|err=" /tmp/nfsgw/fio-killed.txt | head -3
say "kernel client: $(xprt_field 3) connects (reconnects after the kill)"
check "the client reconnected" test "$(xprt_field 3)" -ge 2

# The reply cache across the restart: the server dies after recording
# MKDIR's reply and before sending it; the retransmission goes to the next
# server, which answers from the file: mkdir succeeds, the directory was
# made once.
stop_server
start_server --test-crash-after mkdir:1 || exit 1
mkdir "$mnt/made-once" &
mk_pid=$!
for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
say "tern-nfsd killed itself after recording MKDIR's reply; starting it again"
start_server || exit 1
check "mkdir retransmitted to the next server succeeded (not EEXIST)" wait "$mk_pid"
check "the directory exists, once" test -d "$backing/made-once"
kill -USR1 "$srv"
sleep 0.5
say "$(last_stats)"
check "the retransmission was answered from the reply cache file" \
  bash -c "[[ \$(grep 'tern-nfsd: stats:' '$log' | tail -1 | tr ' ' '\n' | sed -n 's/^drc_file_hits=//p') -ge 1 ]]"
umount "$mnt"
stop_server

echo "--- nfs-gateway (tern-nfsd mounted by the kernel's NFS/RDMA client):"
printf '    %s\n' "${summary[@]}"
if ((fails > 0)); then
  echo "--- the end of tern-nfsd's log:"
  tail -30 "$log"
fi
exit $((fails > 0))
