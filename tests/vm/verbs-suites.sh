#!/bin/bash
# Runs inside the rxe VM (scripts/rxe-vm) for the VM stage of scripts/test.sh:
# every suite that needs real verbs, over rxe0, one process each, a summary at
# the end; exit status 0 only if all passed.
#   tests/vm/verbs-suites.sh BUILDDIR
set -uo pipefail
build=${1:?usage: verbs-suites.sh BUILDDIR}
dev="verbs:dev=rxe0,addr=169.254.77.1"
declare -a summary=()
fails=0

# The guest's CPU time, busy and idle, summed over its vCPUs (USER_HZ ticks of
# /proc/stat's first line): printed at the end, so that each run says how
# much of the host's CPU this stage leaves to the builds scripts/test.sh
# runs beside it (an idle vCPU costs the host nearly nothing under TCG).
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6; exit}' /proc/stat; }
read -r busy0 idle0 < <(cpu_ticks)

# rxe0 made again, as scripts/rxe-vm/init makes it (after a deletion that
# finishes only once the process that held it has exited, or a CM that no
# longer completes a connection).
remake_rxe0() {
  ip link set dum0 up 2>/dev/null
  for _ in $(seq 100); do [[ -e /sys/class/infiniband/rxe0 ]] || break; sleep 0.1; done
  [[ -e /sys/class/infiniband/rxe0 ]] || rdma link add rxe0 type rxe netdev dum0 || echo "verbs-suites: could not re-create rxe0" >&2
  for _ in $(seq 100); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && break; sleep 0.1; done
}

# Whether rxe0's CM still completes a connection (rping, 2 pings).
cm_works() {
  timeout 20 rping -s -a 169.254.77.1 -C 2 >/dev/null 2>&1 &
  local srv=$! rc
  sleep 0.5
  timeout 10 rping -c -a 169.254.77.1 -C 2 >/dev/null 2>&1
  rc=$?
  kill "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  return $rc
}

suite() {  # suite NAME COMMAND...
  local name=$1 t0 rc
  shift
  echo "--- $name: $*"
  t0=$(date +%s)
  "$@"
  rc=$?
  if ((rc == 0)); then summary+=("ok      $name ($(($(date +%s) - t0)) s)")
  else summary+=("FAILED  $name (exit $rc)"); fails=$((fails + 1)); fi
}

suite conformance env TERN_CONFORMANCE_DEVICES="$dev" "$build/tests/conformance/tern-conformance" --gtest_brief=1
# mlx5: on rxe (no mlx5dv) must fall back to the verbs path and pass the same suite.
suite conformance-mlx5-fallback env TERN_CONFORMANCE_DEVICES="mlx5:${dev#verbs:}" \
  "$build/tests/conformance/tern-conformance" --gtest_brief=1
suite rpc-functional env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-rpc-functional" --gtest_brief=1
# RFC 8166's chunks in full (several of each, long calls, placement), and
# the engine's shared pools and limits, over the device's shared receive queue.
suite chunks env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-chunks" --gtest_brief=1
suite pools env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-pools" --gtest_brief=1
# A server engine serving 256 connections at once over rxe (one client
# engine, one peer address), every reply checked: ~10 s more than 64 did
# here (docs/rxe-vm.md). (scripts/test.sh builds the benchmarks; a build
# without them says so.)
if [[ -x $build/bench/tern-scale ]]; then
  suite scale-256 "$build/bench/tern-scale" --conns 256 --seconds 3 --dev "$dev,port=20999"
else
  summary+=("SKIPPED scale-256 (no $build/bench/tern-scale: configure with -Dbenchmarks=true)")
fi
# mw=off: a device without fast registration, so the engine falls back to its
# registration cache (ibv_reg_mr per chunk), which it allows only for trusted
# peers; the tests that do not count FRWR/invalidation work.
suite rpc-regcache env TERN_RPC_DEVICE="$dev,mw=off" TERN_RPC_TRUSTED_PEERS=1 \
  "$build/tests/functional/tern-rpc-functional" --gtest_brief=1 \
  --gtest_filter='Rpc.InlineEcho:Rpc.ReadChunkIsPulledByTheServer:Rpc.WriteChunkIsFilledByTheServer:Rpc.ReplyChunkCarriesLargeResults:Rpc.RegistrationCacheServesEveryChunkKind:Rpc.ManyCallsInFlightAllComplete:Rpc.ConnectionLossFailsOutstandingCallsOnce:Rpc.HandlerMayReplyLater'
# Hostile peers over rxe, the cases about rkeys and invalidation: a raw server
# probing a Tern client's rkeys after each way a call can end, another
# connection's rkeys, Send With Invalidate of another call's, a foreign, a
# stale or an unoffered rkey; a raw client naming rkeys it never offered.
# (Cases that need pmd/shm or window bounds skip themselves on rxe.)
suite hostile-server-rkeys env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-hostile-server" --gtest_brief=1 \
  --gtest_filter='HostileServer.AWellBehaved*:HostileServer.SendWithInvalidate*:HostileServer.Stray*:HostileServerNoInv.*:Endings/RkeyProbe.*:Registrations/OtherConnection.*:Devices/OtherConnectionInv.*:HostileServer.WritesOutside*:HostileServer.LongLived*'
suite hostile-client-rkeys env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-hostile-client" --gtest_brief=1 \
  --gtest_filter='HostileClient.ReadChunkWithAnUnknownRkey*:HostileClient.WriteChunkWithAnUnknownRkey*:HostileClient.WriteChunkOfferedReadOnly*:HostileClient.ReadChunkLongerThan*:HostileClient.SendWithInvalidateToTheServer*:HostileClient.LongLived*'
# The fault soak, short, over rxe (docs/reliability.md): connections closed by
# the host, cancels, deadlines, SIGKILL and SIGSTOP of clients and of the
# server, every payload checked; pmd/shm's driver faults (dropped QPs, QP
# errors, delayed completions) have no rxe counterpart here.
if [[ -x $build/apps/tern-soak ]]; then
  suite soak "$build/apps/tern-soak" --seconds 30 --clients 2 --engines 1 --device "$dev,port=20998"
else
  summary+=("SKIPPED soak (no $build/apps/tern-soak: configure with -Dapps=true)")
fi
# Several engines serving one address (ListenGroup) over rxe: requests
# handed between engines' devices (rdma_migrate_id).
suite listen-group env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-listen-group" --gtest_brief=1
# tern-nfsd's NFSv3 server driven by a Tern client over rxe: chunks, long
# calls (RDMA_NOMSG), garbage, the reply cache across a restart.
suite nfsd-functional env TERN_RPC_DEVICE="$dev" "$build/tests/functional/tern-nfsd-functional" --gtest_brief=1
# tern-nfsd mounted by the kernel's own NFS/RDMA client (xprtrdma): file
# work, fio --verify, nconnect, kill -9 and restart under load.
suite nfs-gateway "$(dirname "$0")/nfs-gateway.sh" "$build"
# An error from the device under the export (dm's error target under one
# file): the client reading it gets EIO (NFS3ERR_IO), another process
# reading another file through the same engine is answered throughout.
suite nfs-device-error "$(dirname "$0")/nfs-device-error.sh" "$build"
# A write load (fio, buffered, sequential and random) through the kernel's
# client on tern-nfsd and on the kernel's nfsd in the same boot: on
# tern-nfsd no reconnect, no retransmission, no RNR NAK (docs/nfs-gateway.md,
# "Write load").
suite nfs-write-load "$(dirname "$0")/nfs-write-load.sh" "$build"
# tern-nfsd found through rpcbind (rpcinfo, showmount, a mount without
# port=/mountport=/nolock) and two mounts' locks excluding each other
# through its NLM.
suite nfs-locks "$(dirname "$0")/nfs-locks.sh" "$build"
# The kernel's NFS server (svcrdma) on 169.254.77.1:20049; the test starts it.
suite nfs-interop "$build/tests/interop/tern-nfs-interop" --gtest_brief=1
# The same soak with two port flaps under it (dum0 down 2 s, then up;
# docs/reliability.md): every invariant 0, and every client completes calls
# again within 30 s of each `up`. No process faults: a process killed while
# the port is down has its ids destroyed by the kernel, whose DREQs then
# fail on the down port, which breaks rxe's CM for good (the same happens
# if a CM message is still on its way out as the port goes down, which is
# why the soak stops its processes for that instant). After it, rxe0's CM
# must still complete a connection; if it does not, the suite fails and
# rxe0 is made again for the suites after it.
if [[ -x $build/apps/tern-soak ]]; then
  suite soak-port-flaps "$build/apps/tern-soak" --seconds 30 --clients 2 --engines 1 --no-proc-faults \
    --flap-netdev dum0 --flaps 2 --device "$dev,port=20997"
  if ! cm_works; then
    summary+=("FAILED  rxe0's CM completes no connection after the port flaps (rxe0 made again)")
    fails=$((fails + 1))
    rdma link delete rxe0
    remake_rxe0
  fi
else
  summary+=("SKIPPED soak-port-flaps (no $build/apps/tern-soak: configure with -Dapps=true)")
fi
# rpcrdma-torture's whole catalogue against the kernel's svcrdma and against
# tern-nfsd in this boot, but the cases tests/vm/torture-vm.exclude names
# with the reason (one: it leaves the kernel's nfsd answering no one). Its
# JSON goes to BUILDDIR/conformance-vm/; scripts/test.sh prints the
# difference table on the host (the guest has no python) and fails on a
# difference docs/conformance.md does not list. This suite fails only if
# the runs could not be made. Two cases at once against svcrdma (whose
# cases wait on the kernel, not the CPU), one at a time against tern-nfsd
# (whose engine polls a whole vCPU of the two: a second requester only
# slows it); measured in docs/conformance.md ("In CI"). After the other
# suites but device-events: a case that breaks the kernel's nfsd (an oops
# kills its thread) must not fail the suites that share this kernel.
if [[ -x $build/apps/torture/rpcrdma-torture && -x $build/apps/tern-nfsd ]]; then
  rm -rf "$build/conformance-vm" && mkdir -p "$build/conformance-vm"
  suite torture-compare env OUT="$build/conformance-vm" NFSD="$build/apps/tern-nfsd" \
    TORTURE="$build/apps/torture/rpcrdma-torture" TIMEOUT=5 KERNEL_JOBS=2 TERN_JOBS=1 CASES='*' \
    EXCLUDE="$(grep -v '^#' "$(dirname "$0")/torture-vm.exclude" | awk '{print $1}' | tr '\n' ' ')" \
    bash -c '"$0" && [[ -s $OUT/kernel.json && -s $OUT/tern.json ]]' "$(dirname "$0")/torture-compare.sh"
else
  summary+=("SKIPPED torture-compare (no rpcrdma-torture or tern-nfsd: configure with -Dapps=true)")
fi
# Last: it takes dum0 down and deletes rxe0 (tests/vm/device_events_test.cc).
# The deletion completes only once the test process has exited (rxe cannot
# disassociate a process from a device), so rxe0 is made again here, as
# scripts/rxe-vm/init makes it, for anything run after this script.
suite device-events "$build/tests/vm/tern-device-events" --gtest_brief=1
remake_rxe0

echo "--- verbs suites on rxe0:"
printf '    %s\n' "${summary[@]}"
read -r busy1 idle1 < <(cpu_ticks)
hz=$(getconf CLK_TCK)
echo "--- guest CPU over the suites: busy $(((busy1 - busy0) / hz)) s, idle $(((idle1 - idle0) / hz)) s (all vCPUs)"
exit $((fails > 0))
