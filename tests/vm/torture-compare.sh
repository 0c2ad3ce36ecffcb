#!/bin/bash
# Runs inside the rxe VM for scripts/measure-conformance.sh: rpcrdma-torture's
# catalogue against the kernel's NFS/RDMA server (nfsd + svcrdma,
# kernel-nfsd-start) and against tern-nfsd, in the same boot, over rxe0.
# Both are asked NFSv3 NULL (the call every NFS/RDMA server answers); the
# reply-chunk cases that need an echo procedure skip on both. The JSON goes
# to $OUT/kernel.json and $OUT/tern.json. CASES: globs separated by
# spaces (default: all); TIMEOUT: rpcrdma-torture's --timeout (default 5).
set -uo pipefail
: "${OUT:?}" "${NFSD:?}" "${TORTURE:?}" "${CASES:=*}" "${TIMEOUT:=5}"
sel=()
set -f  # the globs are rpcrdma-torture's, not the shell's
for g in $CASES; do sel+=(--case "$g"); done
set +f
addr=169.254.77.1

kernel-nfsd-start /export >/dev/null
mkdir -p /srv/texport
mountpoint -q /srv/texport || mount -t tmpfs -o mode=0777 tmpfs /srv/texport
"$NFSD" --no-rpcbind --nlm-port off --export /srv/texport --name /texport --addr $addr --port 20050 --mount-port 20048 \
  --no-root-squash --engines 1 --state-dir /var/lib/tern-nfsd-torture >"$OUT/tern-nfsd.log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done

"$TORTURE" --device verbs:dev=rxe0 --server $addr:20049 "${sel[@]}" --timeout "$TIMEOUT" --json "$OUT/kernel.json" \
  >"$OUT/kernel.txt" 2>&1
echo "kernel: exit $?"
"$TORTURE" --device verbs:dev=rxe0 --server $addr:20050 "${sel[@]}" --timeout "$TIMEOUT" --json "$OUT/tern.json" \
  >"$OUT/tern.txt" 2>&1
echo "tern-nfsd: exit $?"
kill $srv 2>/dev/null
wait $srv 2>/dev/null
dmesg | tail -50 >"$OUT/dmesg.txt"
exit 0
