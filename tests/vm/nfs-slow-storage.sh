#!/bin/bash
# Runs inside the rxe VM for scripts/measure-nfs-slow.sh: IOPS on slow
# storage. Two RAM disks (brd) behind device-mapper's delay target (every
# read and write waits DELAY_MS): one holds an ext4 file system whose
# directories tern-nfsd (one engine) and the kernel's nfsd (KNFSD_THREADS,
# default 8 as rpc.nfsd's) export in the same boot; the other is the raw
# device fio measures directly. fio: 4 KiB random reads, then random writes,
# JOBS jobs at DEPTH each, O_DIRECT, libaio, on the device and through the
# kernel's NFSv3/RDMA client on each server; every job its own SIZE file (a
# SIZE slice of the raw device). Before each run the server's caches are
# dropped and readahead is off, so a READ is a device read (fio touches each
# block at most once per run: its random map).
#
# TERN_VARIANTS: tern-nfsd option sets separated by ';', each run as its own
# server "tern<i>" (default one: "" -- tern-nfsd's defaults), e.g.
# ";--storage-per-peer 64 --storage-inflight 128".
# Output in $OUT: <server>-<rw>-<round>.json (fio), <server>-<rw>-<round>.
# {before,after} (the client's mountstats), tern<i>.log, dm.txt.
set -euo pipefail
: "${OUT:?}" "${NFSD:?}" "${SECS:=5}" "${ROUNDS:=2}" "${DELAY_MS:=2}" "${DEPTH:=32}" "${JOBS:=4}" "${SIZE:=64}"
: "${KNFSD_THREADS:=8}" "${TERN_VARIANTS:=}"
# No udev in the VM: dmsetup makes the /dev/mapper nodes itself.
export DM_DISABLE_UDEV=1
addr=169.254.77.1

# --- the devices: ram0 (file system) and ram1 (raw), each behind dm-delay.
fs_mib=$((JOBS * SIZE * 2 + 256))
raw_mib=$((JOBS * SIZE))
rd_mib=$((fs_mib > raw_mib ? fs_mib : raw_mib))
modprobe brd rd_nr=2 rd_size=$((rd_mib * 1024))
modprobe -a ext4 dm_delay
# The file system is made before the delay goes under it (mkfs's writes need
# no waiting), with its inode tables written now: a lazy init thread would
# add writes of its own to the runs.
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard /dev/ram0
dmsetup create slowfs --table "0 $(blockdev --getsz /dev/ram0) delay /dev/ram0 0 $DELAY_MS"
dmsetup create slowraw --table "0 $(blockdev --getsz /dev/ram1) delay /dev/ram1 0 $DELAY_MS"
for d in /dev/ram0 /dev/ram1 /dev/mapper/slowfs /dev/mapper/slowraw; do blockdev --setra 0 "$d"; done
mkdir -p /srv/slow
dmsetup mknodes
mount -t ext4 /dev/mapper/slowfs /srv/slow
dmsetup table >"$OUT/dm.txt"

# --- the servers. kernel-nfsd-start mounts a tmpfs on a directory that is
# not a mount point; a bind mount makes the ext4 directory one.
mkdir -p /srv/slow/knfsd /srv/slow/tern /mnt/kernel
chmod 0777 /srv/slow/knfsd /srv/slow/tern
mount --bind /srv/slow/knfsd /srv/slow/knfsd
kernel-nfsd-start /srv/slow/knfsd >/dev/null
echo "$KNFSD_THREADS" >/proc/fs/nfsd/threads
opts=vers=3,proto=rdma,nolock,hard
mount -t nfs -o "$opts,port=20049" $addr:/srv/slow/knfsd /mnt/kernel
IFS=';' read -r -a variants <<<"$TERN_VARIANTS"
((${#variants[@]})) || variants=("")
servers="kernel"
for i in "${!variants[@]}"; do servers+=" tern$i"; done
srv=
start_tern() {  # start_tern I
  local i=$1
  # shellcheck disable=SC2086 # a variant is a list of options
  "$NFSD" --no-rpcbind --nlm-port off --export /srv/slow/tern --name /texport --addr $addr --port 20050 --mount-port 20048 --no-root-squash \
    --engines 1 --state-dir /var/lib/tern-nfsd-slow ${variants[$i]} >>"$OUT/tern$i.log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done
  mkdir -p /mnt/tern
  mount -t nfs -o "$opts,port=20050,mountport=20048,mountproto=tcp" $addr:/texport /mnt/tern
}
stop_tern() {
  umount /mnt/tern
  kill -TERM "$srv"
  wait "$srv" || true
}

fio_run() {  # fio_run TARGET-OPTIONS... -- RW OUTFILE
  local args=()
  while [[ $1 != -- ]]; do args+=("$1"); shift; done
  fio --name=slow "${args[@]}" --numjobs="$JOBS" --group_reporting --ioengine=libaio --direct=1 --rw="$2" \
    --bs=4k --iodepth="$DEPTH" --time_based --runtime="$SECS" --ramp_time=1 --output-format=json \
    --output="$3" >/dev/null
}
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# What the server's threads wait in, sampled every 20 ms while fio runs:
# one line per sample, the wait channel of each thread in D state (blocked
# on the device or a lock). tern-nfsd's are its own threads and io_uring's
# workers (iou-wrk-*, threads of the process); knfsd's its nfsd threads.
sample_waits() {  # sample_waits NAME OUTFILE
  set +e  # a thread that ends between listing and reading is skipped
  local tasks
  while :; do
    if [[ $1 == kernel ]]; then tasks=$(for p in $(pgrep -x nfsd); do echo /proc/$p; done)
    else tasks=$(ls -d /proc/"$srv"/task/* 2>/dev/null); fi
    line=
    for t in $tasks; do
      read -r st 2>/dev/null <"$t/stat" || continue
      st=${st##*) }
      [[ ${st%% *} == D ]] && line+="$(cat "$t/wchan" 2>/dev/null) "
    done
    echo "$line" >>"$2"
    sleep 0.02
  done
}
run_server() {  # run_server NAME DIR RW ROUND
  cold
  cat /proc/self/mountstats >"$OUT/$1-$3-$4.before"
  sample_waits "$1" "$OUT/$1-$3-$4.waits" &
  local sampler=$!
  fio_run --directory="$2" --size="${SIZE}m" -- "$3" "$OUT/$1-$3-$4.json"
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  cat /proc/self/mountstats >"$OUT/$1-$3-$4.after"
}

# Lay the files out (and the raw device's slices): a read of a hole would
# not reach the device, a first write would allocate blocks.
fio --name=layout --filename=/dev/mapper/slowraw --size="${raw_mib}m" --rw=write --bs=1m --ioengine=libaio \
  --iodepth=8 --direct=1 >/dev/null
fio --name=slow --directory=/mnt/kernel --numjobs="$JOBS" --size="${SIZE}m" --rw=write --bs=1m --ioengine=libaio \
  --iodepth=4 --direct=1 >/dev/null
start_tern 0
fio --name=slow --directory=/mnt/tern --numjobs="$JOBS" --size="${SIZE}m" --rw=write --bs=1m --ioengine=libaio \
  --iodepth=4 --direct=1 >/dev/null
stop_tern

for r in $(seq "$ROUNDS"); do
  order=$servers
  ((r % 2 == 0)) && order=$(tr ' ' '\n' <<<"$servers" | tac | tr '\n' ' ')
  for rw in randread randwrite; do
    cold
    fio_run --filename=/dev/mapper/slowraw --size="${SIZE}m" --offset_increment="${SIZE}m" -- "$rw" \
      "$OUT/device-$rw-$r.json"
    for s in $order; do
      if [[ $s == kernel ]]; then
        run_server kernel /mnt/kernel "$rw" "$r"
      else
        i=${s#tern}
        start_tern "$i"
        run_server "$s" /mnt/tern "$rw" "$r"
        kill -USR1 "$srv"
        sleep 0.3
        stop_tern
      fi
    done
  done
  echo "nfs-slow-storage: round $r of $ROUNDS done" >&2
done
umount /mnt/kernel
