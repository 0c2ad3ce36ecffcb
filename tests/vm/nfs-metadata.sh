#!/bin/bash
# Runs inside the rxe VM for scripts/measure-nfs-metadata.sh: a metadata
# storm (tern-meta-storm: create, stat, rename, link, symlink, readlink,
# unlink, mkdir, rmdir, fsstat over N names) through the kernel's NFSv3/RDMA
# client, in the same boot, on tern-nfsd (one engine) and on the kernel's
# nfsd (8 threads, the rpc.nfsd default), each exporting a tmpfs. Rounds
# alternate which server goes first. Per run: the storm's phase times to
# $OUT/<server>-<round>.txt, the client's /proc/self/mountstats before and
# after to $OUT/<server>-<round>.{before,after} (the host script takes the
# per-procedure counts and times from their difference; the guest has no
# python). TERN_OPTS_B (set, even empty) adds a second tern-nfsd ("ternb", its
# own tmpfs and ports) with those options, measured in the same rounds: two
# variants of tern-nfsd compared in one boot. TERN_ENV_B (NAME=VALUE ...) is
# that second tern-nfsd's environment (e.g. TERN_CLOCK=tsc); NFSD_B its
# binary (default NFSD: e.g. another revision's build, for a before/after).
# PROBE (set, non-empty): each storm also writes $OUT/<server>-<round>.probe,
# the guest's CPU and context switches per phase and those of the server's
# threads (nfsd's kernel threads; tern-nfsd's) and the storm's own
# (tern-meta-storm's STORM_PROBE). STRACE=DIR (a strace binary and the
# libraries it needs, shared from the host: the guest has none) adds, after
# the rounds, one storm of STRACE_N names per tern-nfsd with `strace -f -c`
# attached for each phase on its own: $OUT/<server>-strace-<phase>.txt.
set -euo pipefail
: "${OUT:?}" "${NFSD:?}" "${STORM:?}" "${N:=1000}" "${ROUNDS:=3}" "${KNFSD_THREADS:=8}"
addr=169.254.77.1

# tern-nfsd stays out of rpcbind (--no-rpcbind): its MOUNT would answer the
# kernel server's mount through rpcbind otherwise.
kernel-nfsd-start /export >/dev/null
echo "$KNFSD_THREADS" >/proc/fs/nfsd/threads
mkdir -p /srv/texport /mnt/kernel /mnt/tern
mountpoint -q /srv/texport || mount -t tmpfs -o mode=0777 tmpfs /srv/texport
"$NFSD" --no-rpcbind --nlm-port off --export /srv/texport --name /texport --addr $addr --port 20050 --mount-port 20048 --no-root-squash \
  --engines 1 --state-dir /var/lib/tern-nfsd-measure ${TERN_OPTS:-} >"$OUT/tern-nfsd.log" 2>&1 &
srv=$!
servers="kernel tern"
for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done
if [[ -n ${TERN_OPTS_B+set} ]]; then
  mkdir -p /srv/texportb /mnt/ternb
  mountpoint -q /srv/texportb || mount -t tmpfs -o mode=0777 tmpfs /srv/texportb
  env ${TERN_ENV_B:-} "${NFSD_B:-$NFSD}" --no-rpcbind --nlm-port off --export /srv/texportb --name /texportb --addr $addr --port 20052 --mount-port 20051 \
    --no-root-squash --engines 1 --state-dir /var/lib/tern-nfsd-measure-b ${TERN_OPTS_B} >"$OUT/ternb-nfsd.log" 2>&1 &
  srvb=$!
  servers="kernel tern ternb"
  for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20051) 2>/dev/null && break; sleep 0.1; done
fi
opts=vers=3,proto=rdma,nolock,hard
mount -t nfs -o "$opts,port=20049" $addr:/export /mnt/kernel
mount -t nfs -o "$opts,port=20050,mountport=20048,mountproto=tcp" $addr:/texport /mnt/tern
[[ -z ${srvb:-} ]] || mount -t nfs -o "$opts,port=20052,mountport=20051,mountproto=tcp" $addr:/texportb /mnt/ternb
# A short storm on each first: connections made, caches warm.
for s in $servers; do "$STORM" /mnt/$s 50 >/dev/null; done
for r in $(seq "$ROUNDS"); do
  order=$servers
  ((r % 2 == 0)) && order=$(echo $servers | tr ' ' '\n' | tac | tr '\n' ' ')
  for s in $order; do
    cat /proc/self/mountstats >"$OUT/$s-$r.before"
    probe=()
    if [[ -n ${PROBE:-} ]]; then
      case $s in
        kernel) pids=$(pgrep -x nfsd | tr '\n' ' ') ;;
        tern) pids=$srv ;;
        *) pids=$srvb ;;
      esac
      probe=(env STORM_PROBE="$OUT/$s-$r.probe" STORM_PIDS="$pids")
    fi
    "${probe[@]}" "$STORM" /mnt/$s "$N" >"$OUT/$s-$r.txt"
    cat /proc/self/mountstats >"$OUT/$s-$r.after"
  done
  echo "nfs-metadata: round $r of $ROUNDS done" >&2
done
if [[ -n ${STRACE:-} ]]; then
  # strace stops counting at SIGINT and writes its table; the hook waits
  # for that before the next phase. Its counts include what runs by time,
  # not per call (the descriptor cache's sweep each second, the service
  # threads' timeouts), which strace's slowing stretches: read the per-call
  # system calls (epoll_wait, futex, write, read, ioctl) from them.
  cat >/tmp/strace-hook <<'HOOK'
#!/bin/bash
if [[ $STORM_EDGE == begin ]]; then
  LD_LIBRARY_PATH=$STRACE "$STRACE/strace" -f -c -o "$OUT/$S-strace-$STORM_PHASE.txt" -p "$SPID" 2>/dev/null &
  echo $! >/tmp/strace.pid
  sleep 1
else
  kill -INT "$(cat /tmp/strace.pid)"
  while kill -0 "$(cat /tmp/strace.pid)" 2>/dev/null; do sleep 0.1; done
fi
HOOK
  chmod +x /tmp/strace-hook
  for s in tern ${srvb:+ternb}; do
    spid=$srv
    [[ $s == ternb ]] && spid=$srvb
    S=$s SPID=$spid STORM_HOOK=/tmp/strace-hook "$STORM" /mnt/$s "${STRACE_N:-$N}" >"$OUT/$s-strace.txt"
  done
fi
grep ' nfs ' /proc/mounts >"$OUT/mounts.txt"
umount /mnt/kernel /mnt/tern
[[ -z ${srvb:-} ]] || umount /mnt/ternb
kill -TERM $srv ${srvb:-}
wait $srv || true
[[ -z ${srvb:-} ]] || wait $srvb || true
