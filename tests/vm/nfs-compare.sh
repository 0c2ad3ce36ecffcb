#!/bin/bash
# Runs inside the rxe VM for scripts/measure-nfs.sh: the same fio jobs, in
# the same boot, against tern-nfsd and against the kernel's own NFS server
# (nfsd with svcrdma, kernel-nfsd-start), each exporting a tmpfs and mounted
# by the kernel's NFS/RDMA client with the same options. Rounds alternate
# which server goes first. fio's JSON goes to $OUT/<server>-<job>-<round>.json
# (the guest has no python; the host script reads them).
set -euo pipefail
: "${OUT:?}" "${NFSD:?}" "${SECS:=5}" "${ROUNDS:=3}" "${ENGINES:=2}"
addr=169.254.77.1

# The kernel's server: /export (tmpfs) on rdma port 20049.
kernel-nfsd-start /export >/dev/null
# tern-nfsd: its own tmpfs on rdma port 20050, MOUNT on tcp 20048.
mkdir -p /srv/texport /mnt/kernel /mnt/tern
mountpoint -q /srv/texport || mount -t tmpfs -o mode=0777 tmpfs /srv/texport
"$NFSD" --no-rpcbind --nlm-port off --export /srv/texport --name /texport --addr $addr --port 20050 --mount-port 20048 --no-root-squash \
  --engines "$ENGINES" --state-dir /var/lib/tern-nfsd-measure >"$OUT/tern-nfsd.log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done
opts=vers=3,proto=rdma,nolock,hard
mount -t nfs -o "$opts,port=20049" $addr:/export /mnt/kernel
mount -t nfs -o "$opts,port=20050,mountport=20048,mountproto=tcp" $addr:/texport /mnt/tern
grep ' nfs ' /proc/mounts >"$OUT/mounts.txt"

# name rw bs iodepth
jobs=("randread4k randread 4k 16" "randwrite4k randwrite 4k 16" "seqread1m read 1m 4" "seqwrite1m write 1m 4")
fio_one() {  # fio_one DIR NAME RW BS DEPTH OUTFILE
  fio --name="$2" --directory="$1" --filename="$2.dat" --size=64m --ioengine=libaio --direct=1 --rw="$3" \
    --bs="$4" --iodepth="$5" --time_based --runtime="$SECS" --ramp_time=1 --output-format=json --output="$6" \
    >/dev/null
}
# Lay the files out first (a job on a missing file would time its creation).
for s in kernel tern; do
  for j in "${jobs[@]}"; do
    read -r name _ <<<"$j"
    fio --name=layout --directory=/mnt/$s --filename="$name.dat" --size=64m --rw=write --bs=1m \
      --ioengine=libaio --direct=1 >/dev/null
  done
done
for r in $(seq "$ROUNDS"); do
  order="kernel tern"
  ((r % 2 == 0)) && order="tern kernel"
  for j in "${jobs[@]}"; do
    read -r name rw bs depth <<<"$j"
    for s in $order; do fio_one /mnt/$s "$name" "$rw" "$bs" "$depth" "$OUT/$s-$name-$r.json"; done
  done
  echo "nfs-compare: round $r of $ROUNDS done" >&2
done
# The kernel client's transport counters for each mount (xprtrdma's line).
awk '$1 == "device" { dev = $2 " on " $5 } $1 == "xprt:" && $2 == "rdma" { print dev ": " $0 }' /proc/self/mountstats \
  >"$OUT/xprt.txt"
umount /mnt/kernel /mnt/tern
kill -TERM $srv
wait $srv || true
