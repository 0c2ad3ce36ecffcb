#!/bin/bash
# Runs inside the rxe VM for scripts/measure-conformance.sh: rpcrdma-torture's
# catalogue against the kernel's NFS/RDMA server (nfsd + svcrdma,
# kernel-nfsd-start) and against tern-nfsd, in the same boot, over rxe0.
# Both are asked NFSv3 NULL (the call every NFS/RDMA server answers); the
# reply-chunk cases that need an echo procedure skip on both. The JSON goes
# to $OUT/kernel.json and $OUT/tern.json. CASES: globs separated by
# spaces (default: all); EXCLUDE: globs left out; TIMEOUT:
# rpcrdma-torture's --timeout (default 5); KERNEL_JOBS, TERN_JOBS: its
# --jobs against each (default 1). KERNEL_FIRST=1: the kernel's nfsd first,
# then tern-nfsd (the order in which a CM id the guest's kernel held for
# long once made tern-nfsd refuse connections; a re-check, not the stage's).
set -uo pipefail
: "${OUT:?}" "${NFSD:?}" "${TORTURE:?}" "${CASES:=*}" "${EXCLUDE:=}" "${TIMEOUT:=5}"
: "${KERNEL_JOBS:=1}" "${TERN_JOBS:=1}"
sel=()
set -f  # the globs are rpcrdma-torture's, not the shell's
for g in $CASES; do sel+=(--case "$g"); done
for g in $EXCLUDE; do sel+=(--exclude "$g"); done
set +f
addr=169.254.77.1

# tern-nfsd first by default: a run against the kernel's nfsd has left the
# guest's CM holding an id for minutes (an nfsd thread oopsed in svcrdma's
# read path during it, docs/conformance.md), and tern-nfsd, in the same
# kernel, then refused connections it could not finish destroying.
run_tern() {
  mkdir -p /srv/texport
  mountpoint -q /srv/texport || mount -t tmpfs -o mode=0777 tmpfs /srv/texport
  "$NFSD" --no-rpcbind --nlm-port off --export /srv/texport --name /texport --addr $addr --port 20050 --mount-port 20048 \
    --no-root-squash --engines 1 --state-dir /var/lib/tern-nfsd-torture >"$OUT/tern-nfsd.log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done

  t0=$(date +%s%N)
  "$TORTURE" --device verbs:dev=rxe0 --server $addr:20050 --jobs "$TERN_JOBS" "${sel[@]}" --timeout "$TIMEOUT" --json "$OUT/tern.json" \
    >"$OUT/tern.txt" 2>&1
  echo "tern-nfsd: exit $?, $((($(date +%s%N) - t0) / 1000000)) ms"
  t0=$(date +%s)
  kill $srv 2>/dev/null
  wait $srv 2>/dev/null
  echo "tern-nfsd: stopped in $(($(date +%s) - t0)) s"
}

run_kernel() {
  kernel-nfsd-start /export >/dev/null
  t0=$(date +%s%N)
  "$TORTURE" --device verbs:dev=rxe0 --server $addr:20049 --jobs "$KERNEL_JOBS" "${sel[@]}" --timeout "$TIMEOUT" --json "$OUT/kernel.json" \
    >"$OUT/kernel.txt" 2>&1
  echo "kernel: exit $?, $((($(date +%s%N) - t0) / 1000000)) ms"
}

if [[ ${KERNEL_FIRST:-0} == 1 ]]; then
  run_kernel
  run_tern
else
  run_tern
  run_kernel
fi
# The kernel's log of the run, without rxe's per-connection noise (oopses
# and CM warnings are what matter).
dmesg | grep -v -e "speed is unknown" -e "rxe_invalidate_mr: No MR" | tail -400 >"$OUT/dmesg.txt"
exit 0
