#!/bin/bash
# Runs inside the rxe VM for scripts/measure-nfs-cached-read.sh: 4 KiB random
# reads of a file the server's page cache holds, through the kernel's
# NFS/RDMA client (O_DIRECT, so that every read reaches the server), against
# two tern-nfsd binaries in the same boot: A ($NFSD_A) and B ($NFSD_B), one
# engine each, the same options, exporting the same directories -- one on
# ext4 (a RAM disk, /dev/ram0: a disk file system's page cache) and one on
# tmpfs. One server runs at a time; rounds alternate which goes first.
# fio's JSON goes to $OUT/<fs>-<A|B>-<round>.json, each server's log (its
# counters at exit) to $OUT/<fs>-<A|B>-<round>.log.
set -euo pipefail
: "${OUT:?}" "${NFSD_A:?}" "${NFSD_B:?}" "${SECS:=5}" "${ROUNDS:=3}" "${DEPTH:=16}"
addr=169.254.77.1

modprobe brd rd_nr=1 rd_size=$((256 * 1024))
modprobe ext4
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard /dev/ram0
mkdir -p /srv/ext4 /srv/tmpfs /mnt/tern
mount -t ext4 /dev/ram0 /srv/ext4
mount -t tmpfs -o mode=0777 tmpfs /srv/tmpfs
chmod 0777 /srv/ext4
opts=vers=3,proto=rdma,nolock,hard
srv=
start_tern() {  # start_tern BINARY DIR LOG
  "$1" --no-rpcbind --nlm-port off --export "$2" --name /texport --addr $addr --port 20050 --mount-port 20048 \
    --no-root-squash --engines 1 --state-dir /var/lib/tern-nfsd-cached >"$3" 2>&1 &
  srv=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done
  mount -t nfs -o "$opts,port=20050,mountport=20048,mountproto=tcp" $addr:/texport /mnt/tern
}
stop_tern() {
  umount /mnt/tern
  kill -TERM "$srv"
  wait "$srv" || true
}
# The file: written once through server A, then read once on the server's
# side, so that every page of it is in the page cache before any run.
for fs in ext4 tmpfs; do
  start_tern "$NFSD_A" /srv/$fs "$OUT/$fs-layout.log"
  fio --name=layout --directory=/mnt/tern --filename=data --size=64m --rw=write --bs=1m --ioengine=libaio \
    --direct=1 >/dev/null
  stop_tern
  sync
  cat /srv/$fs/data >/dev/null
done
for r in $(seq "$ROUNDS"); do
  order="A B"
  ((r % 2 == 0)) && order="B A"
  for fs in ext4 tmpfs; do
    for s in $order; do
      bin=$NFSD_A
      [[ $s == B ]] && bin=$NFSD_B
      start_tern "$bin" /srv/$fs "$OUT/$fs-$s-$r.log"
      fio --name=randread4k --directory=/mnt/tern --filename=data --size=64m --ioengine=libaio --direct=1 \
        --rw=randread --bs=4k --iodepth="$DEPTH" --time_based --runtime="$SECS" --ramp_time=1 \
        --output-format=json --output="$OUT/$fs-$s-$r.json" >/dev/null
      stop_tern
    done
  done
  echo "nfs-cached-read: round $r of $ROUNDS done" >&2
done
