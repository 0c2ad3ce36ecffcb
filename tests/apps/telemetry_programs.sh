#!/usr/bin/env bash
# Every shipped program observable without code (issue 24): started with
# --telemetry PATH (or $TERN_TELEMETRY_SOCK), its engines' counters are read
# while it runs with the real tool, scripts/tern-stats.
#   telemetry_programs.sh TERN-STATS perf TERN-PERF
#   telemetry_programs.sh TERN-STATS nfsd TERN-NFSD
#   telemetry_programs.sh TERN-STATS nfs-read TERN-NFS-READ FAKE-NFSD
set -euo pipefail
stats=$1
what=$2
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch tel-programs

wait_sock() {  # wait_sock PATH LOG: until PATH is a socket
  for _ in $(seq 200); do [[ -S $1 ]] && return 0; sleep 0.05; done
  fail "no socket at $1: $(cat "$2" 2>/dev/null)"
}
# field JSON KEY: KEY's value in one tern-stats reply (0 while the source is
# not there yet: a program opens its socket before it makes its engines).
field() { python3 -c "import json,sys; v=list(json.loads(sys.argv[1]).values())[0]; print((v or {}).get('$2', 0))" "$1"; }

case $what in
perf)
  perf=$3
  # The raw (driver-only) server answers too: it has no engine, /info says who.
  "$perf" server --dev "shm:path=$dir/raw" --telemetry "$dir/raw.tel" --quiet >"$dir/raw.log" 2>&1 &
  rawpid=$!
  wait_sock "$dir/raw.tel" "$dir/raw.log"
  out=$(timeout 20 "$stats" -s "$dir/raw.tel" /info) || fail "tern-stats on the raw server: $out"
  [[ $(field "$out" pid) == "$rawpid" ]] || fail "raw server's /info: $out"

  # --rpc: the server's engine counts the client's calls.
  "$perf" server --rpc --dev "shm:path=$dir/s" --telemetry "$dir/server.tel" --quiet >"$dir/server.log" 2>&1 &
  wait_sock "$dir/server.tel" "$dir/server.log"
  # The shm listener appears under its path only once it listens (pmd/shm
  # binds a private name and renames it), so its presence is readiness.
  wait_sock "$dir/s" "$dir/server.log"
  # The client by $TERN_TELEMETRY_SOCK, read while it runs. It runs until
  # this script has read it and stops it (SIGINT): a run of fixed length
  # ended before a loaded machine got round to the reads. Its --seconds is
  # only a guard, longer than the test's own timeout.
  TERN_TELEMETRY_SOCK=$dir/client.tel "$perf" client --rpc --dev "shm:path=$dir/s" --seconds 600 --warmup 10 \
    --quiet >"$dir/client.log" 2>&1 &
  cpid=$!
  wait_sock "$dir/client.tel" "$dir/client.log"
  calls=0
  # Until its engine has counted calls (0 while the engine is not made yet);
  # the count of looks is a guard, not a measure.
  for _ in $(seq 600); do
    kill -0 "$cpid" 2>/dev/null || fail "the client ended before it was read: $(cat "$dir/client.log")"
    line=$(timeout 20 "$stats" -s "$dir/client.tel" /tern/engine,0) || fail "tern-stats on the client: $line"
    calls=$(field "$line" calls)
    ((calls > 100)) && break
    sleep 0.05
  done
  ((calls > 100)) || fail "the running client's engine counted $calls calls: $line"
  conns=$(timeout 20 "$stats" -s "$dir/client.tel" /tern/conns,0) || fail "conns: $conns"
  [[ $conns == '{"/tern/conns": ["0.'* ]] || fail "the client's connections: $conns"
  # Stopped by a signal, the client exits 1 (its run did not complete; no
  # crash, no sanitizer report) and, like any exit, takes its telemetry
  # socket with it.
  kill -INT "$cpid"
  crc=0
  wait "$cpid" || crc=$?
  [[ $crc == 1 ]] || fail "client stopped by SIGINT: exit $crc: $(cat "$dir/client.log")"
  [[ ! -e $dir/client.tel ]] || fail "the client left its telemetry socket behind"
  # The whole document, every kind (tern-stats without commands).
  all=$(timeout 20 "$stats" -s "$dir/server.tel") || fail "tern-stats (all): $all"
  python3 - "$all" <<'PY' || fail "server document: $all"
import json, sys
d = json.loads(sys.argv[1])
eng = d["engine"]["0"]
assert eng["replies"] > 100, eng
assert any(p["side"] == "server" and p["ops"] > 100 for p in d["proc"].values()), d["proc"]
assert d["device"] and all("driver" in v and "spec" in v for v in d["device"].values()), d.get("device")
PY
  # --eal: DPDK's own telemetry socket, read with DPDK's own client (the
  # socket under $RUNTIME_DIRECTORY, so nothing is left in /var/run).
  # A build without EAL (-Deal=disabled: the shm-only sanitizer build) has
  # no --eal to check; every build with it checks it.
  if [[ ${TERN_HAVE_EAL:-1} == 0 ]]; then
    echo "built without EAL (-Deal=disabled): --eal's rte_telemetry not checked in this build"
  elif [[ -x /usr/bin/dpdk-telemetry.py ]]; then
    RUNTIME_DIRECTORY=$dir "$perf" server --rpc --eal --dev "shm:path=$dir/e" >"$dir/eal.log" 2>&1 &
    epid=$!
    wait_sock "$dir/dpdk/tern-perf-$epid/dpdk_telemetry.v2" "$dir/eal.log"
    grep -q "dpdk-telemetry.py -f tern-perf-$epid" "$dir/eal.log" || fail "--eal does not say where: $(cat "$dir/eal.log")"
    out=$(printf '/tern/engine,0\n' | RUNTIME_DIRECTORY=$dir timeout 20 python3 /usr/bin/dpdk-telemetry.py \
          -f "tern-perf-$epid" 2>&1) || fail "dpdk-telemetry.py: $out"
    [[ $out == *'"replies": 0'* ]] || fail "--eal server's engine 0 over rte_telemetry: $out"
  else
    echo "dpdk-telemetry.py not installed: --eal's rte_telemetry not checked"
  fi
  echo "ok: tern-perf raw, --rpc server and client read with tern-stats"
  ;;
nfsd)
  nfsd=$3
  mkdir -p "$dir/export" "$dir/state"
  "$nfsd" --export "$dir/export" --listen "shm:path=$dir/s" --state-dir "$dir/state" --mount-port off \
    --no-rpcbind --engines 2 --telemetry "$dir/nfsd.tel" >"$dir/log" 2>&1 &
  wait_sock "$dir/nfsd.tel" "$dir/log"
  # The socket opens before the engines are made: wait until it serves.
  for _ in $(seq 200); do grep -q "tern-nfsd: serving" "$dir/log" && break; sleep 0.05; done
  out=$(timeout 20 "$stats" -s "$dir/nfsd.tel" /tern/engines) || fail "tern-stats: $out"
  [[ $out == '{"/tern/engines": ["0", "1"]}' ]] || fail "tern-nfsd's engines: $out"
  line=$(timeout 20 "$stats" -s "$dir/nfsd.tel" /tern/engine,0) || fail "tern-stats: $line"
  [[ $(field "$line" replies) == 0 ]] || fail "engine 0 before any client: $line"
  # Its NFS procedures are sources of their own (per-procedure latency).
  procs=$(timeout 20 "$stats" -s "$dir/nfsd.tel" /tern/procs,0) || fail "procs: $procs"
  [[ $procs == *'"0.100003.3.'*'.s"'* ]] || fail "tern-nfsd's NFSv3 procedures: $procs"
  echo "ok: tern-nfsd's engines and procedures read with tern-stats"
  ;;
nfs-read)
  nfs=$3
  fake=$4
  "$fake" --path "$dir/fake.sock" --size 1048576 --stall-reads >"$dir/fake.out" 2>&1 &
  for _ in $(seq 100); do grep -q listening "$dir/fake.out" 2>/dev/null && break; sleep 0.05; done
  # READs are held by the server: the reader waits, its engine readable.
  "$nfs" --server fake --dev "shm:path=$dir/fake.sock" --path /f --timeout 30 --quiet \
    --telemetry "$dir/read.tel" >"$dir/read.log" 2>&1 &
  wait_sock "$dir/read.tel" "$dir/read.log"
  calls=0
  for _ in $(seq 100); do
    line=$(timeout 20 "$stats" -s "$dir/read.tel" /tern/engine,0) || fail "tern-stats: $line"
    calls=$(field "$line" calls)
    ((calls >= 3)) && break
    sleep 0.05
  done
  ((calls >= 3)) || fail "tern-nfs-read's engine counted $calls calls: $line"
  echo "ok: tern-nfs-read's engine read with tern-stats while its READs wait"
  ;;
*) fail "what: $what" ;;
esac
