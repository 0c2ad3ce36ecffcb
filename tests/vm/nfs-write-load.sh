#!/bin/bash
# Runs inside the rxe VM (scripts/rxe-vm), from tests/vm/verbs-suites.sh: a
# write-heavy load through the Linux kernel's NFS/RDMA client (xprtrdma) on
# tern-nfsd, and the same load on the kernel's own server (nfsd + svcrdma)
# in the same boot, for comparison. fio, buffered: 4 jobs of sequential
# 1 MiB writes (48 MiB each) next to 2 jobs of random 16 KiB writes (16 MiB
# each), fsync at the end -- what made the mount reconnect before
# docs/nfs-gateway.md's fix (the grant outran the posted receives: RNR NAKs,
# which rxe's retry turned into "rxe_reg_fast_mr: ... not free").
# On tern-nfsd it asserts: no reconnect (the xprt's connect count stays 1),
# no retransmission (every op's transmissions equal its count), no RNR NAK
# from rxe0 and no "not free" in the kernel's log, the data in the export.
# knfsd's figures are printed next to tern-nfsd's, not asserted.
#   tests/vm/nfs-write-load.sh BUILDDIR
set -uo pipefail
build=$(cd "${1:?usage: nfs-write-load.sh BUILDDIR}" && pwd)
addr=169.254.77.1 port=20052 mport=20046
backing=/srv/tern-wload state=/var/lib/tern-nfsd-wload log=/tmp/tern-nfsd-wload.log
hw=/sys/class/infiniband/rxe0/ports/1/hw_counters
declare -a summary=()
fails=0
srv=

say() { echo "nfs-write-load: $*"; }
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then summary+=("ok      $name"); else summary+=("FAILED  $name"); fails=$((fails + 1)); fi
}
stop_server() {
  [[ -n $srv ]] || return 0
  kill -TERM "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  srv=
}
trap 'umount -f /mnt/wl-tern /mnt/wl-kernel 2>/dev/null; stop_server' EXIT
hwc() { cat "$hw/$1" 2>/dev/null || echo 0; }
not_free() { dmesg | grep -c 'rxe_reg_fast_mr: .* not free'; }
# The kernel client's figures for the mount on $1 (/proc/self/mountstats):
# the xprt's connect count, and transmissions beyond one per op (retransmissions).
connects() { awk -v m="$1" '$1 == "device" { on = ($5 == m) } on && $1 == "xprt:" { print $5; exit }' /proc/self/mountstats; }
retrans() {
  awk -v m="$1" '$1 == "device" { on = ($5 == m) } on && $1 ~ /^[A-Z_]+:$/ && NF >= 9 && $2 ~ /^[0-9]+$/ { r += $3 - $2 }
    END { print r + 0 }' /proc/self/mountstats
}

t_suite=$(date +%s)
mkdir -p "$backing" /mnt/wl-tern /mnt/wl-kernel
mountpoint -q "$backing" || mount -t tmpfs -o mode=0777,size=600m tmpfs "$backing"
rm -rf "$state" "${backing:?}"/*
kernel-nfsd-start /export >/dev/null || { say "kernel-nfsd-start failed"; exit 1; }
rm -rf /export/wload
"$build/apps/tern-nfsd" --no-rpcbind --nlm-port off --export "$backing" --name /wload --addr $addr --port $port --mount-port $mport \
  --no-root-squash --engines 2 --state-dir "$state" >"$log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/$mport) 2>/dev/null && break; sleep 0.1; done
opts=vers=3,proto=rdma,nolock,hard
mount -t nfs -o "$opts,port=$port,mountport=$mport,mountproto=tcp" $addr:/wload /mnt/wl-tern ||
  { say "mount of tern-nfsd failed"; tail -5 "$log"; exit 1; }
mount -t nfs -o "$opts,port=20049" $addr:/export /mnt/wl-kernel || { say "mount of knfsd failed"; exit 1; }
mkdir -p /mnt/wl-kernel/wload

load() {  # load DIR: the write load; its wall time in seconds
  local t0 a b
  t0=$(date +%s.%N)
  fio --name=seq --directory="$1" --rw=write --bs=1m --size=48m --numjobs=4 --ioengine=psync --end_fsync=1 \
    --group_reporting --output=/tmp/wload-seq.txt &
  a=$!
  fio --name=rand --directory="$1" --rw=randwrite --bs=16k --size=16m --numjobs=2 --ioengine=psync --end_fsync=1 \
    --group_reporting --output=/tmp/wload-rand.txt &
  b=$!
  wait $a $b
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
declare -A secs rnr nf
for s in tern kernel; do
  dir=/mnt/wl-$s
  [[ $s == kernel ]] && dir=/mnt/wl-kernel/wload
  r0=$(hwc send_rnr_err) n0=$(not_free)
  secs[$s]=$(load "$dir")
  rnr[$s]=$(($(hwc send_rnr_err) - r0)) nf[$s]=$(($(not_free) - n0))
done
for s in tern kernel; do
  m=/mnt/wl-$s
  say "$(printf '%-9s %6s s, connects %s, retransmissions %s, RNR NAKs %s, "not free" %s' \
    "$([[ $s == tern ]] && echo tern-nfsd || echo knfsd)" "${secs[$s]}" "$(connects $m)" "$(retrans $m)" "${rnr[$s]}" "${nf[$s]}")"
done
check "tern-nfsd: the client never reconnected (connect count 1)" test "$(connects /mnt/wl-tern)" -eq 1
check "tern-nfsd: no retransmission" test "$(retrans /mnt/wl-tern)" -eq 0
check "tern-nfsd: no RNR NAK (every granted call found a receive posted)" test "${rnr[tern]}" -eq 0
check "tern-nfsd: no 'rxe_reg_fast_mr: ... not free' in the client's log" test "${nf[tern]}" -eq 0
check "tern-nfsd: the export holds every byte written (4 x 48 MiB, 2 x 16 MiB)" \
  test "$(du -b --apparent-size -c "$backing"/seq.* "$backing"/rand.* | tail -1 | cut -f1)" -eq $(((4 * 48 + 2 * 16) << 20))
rm -rf /mnt/wl-tern/* /mnt/wl-kernel/wload
umount /mnt/wl-tern /mnt/wl-kernel
stop_server
say "$(grep 'tern-nfsd: stats:' "$log" | tail -1)"
echo "--- nfs-write-load (write load through the kernel's NFS/RDMA client, $(($(date +%s) - t_suite)) s):"
printf '    %s\n' "${summary[@]}"
if ((fails > 0)); then
  echo "--- the end of tern-nfsd's log:"
  tail -20 "$log"
  dmesg | grep -E 'rxe|rpcrdma|nfs:' | tail -10
fi
exit $((fails > 0))
