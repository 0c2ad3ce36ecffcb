#!/usr/bin/env bash
# The main job: installs what is missing, builds Tern (release), then runs a
# tern-perf server and client over the shm driver, pinned to two cores, and
# prints latency and throughput reports: raw driver SENDs first (the
# baseline), then RPC calls through the engine (--rpc), inline and with 64 KiB
# through read and write chunks. It ends with a summary: what an RPC costs
# over the raw SEND, the rates, and a warning when the machine was busy (the
# figures then say more about the machine than about Tern).
#   scripts/run-perf.sh [--seconds S] [--size N]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
seconds=2
size=32
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S] [--size N]" >&2; exit 2 ;;
  esac
done

"$top/scripts/setup.sh"
echo "== building (release) in build-release/" >&2
"$top/scripts/build.sh" build-release -Dbuildtype=release -Dtests=false -Dbenchmarks=false
perf="$top/build-release/apps/tern-perf"

sock=$(mktemp -u /tmp/tern-perf-XXXXXX.sock)
out=$(mktemp -d /tmp/tern-perf-XXXXXX)
server_pid=
cleanup() {
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true
  [[ -n "$server_pid" ]] && wait "$server_pid" 2>/dev/null || true
  rm -f "$sock"
}
trap cleanup EXIT

# How busy the machine is before we start: the share of CPU time not idle
# over one second, from /proc/stat.
busy_before=$(python3 - <<'PY'
import time
def sample():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f), f[3] + f[4]  # total, idle + iowait
t0, i0 = sample(); time.sleep(1); t1, i1 = sample()
print(round(100 * (1 - (i1 - i0) / max(t1 - t0, 1))))
PY
)

ncpu=$(nproc)
server_cpu=$(( ncpu > 1 ? 1 : 0 ))
"$perf" server --dev "shm:path=$sock" --lcore "$server_cpu" --quiet &
server_pid=$!
for _ in $(seq 50); do [[ -S "$sock" ]] && break; sleep 0.05; done

run() {
  echo >&2
  echo "== tern-perf client $*" >&2
  "$perf" client --dev "shm:path=$sock" --lcore 0 --seconds "$seconds" "$@"
}
run --mode lat --size "$size" --json "$out/lat.json"
run --mode bw --size "$size" --qd 32 --json "$out/bw-small.json"
run --mode bw --size 65536 --qd 16 --json "$out/bw-64k.json"

# The same server path, now served by the RPC engine (four clients: its
# default --clients).
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
rm -f "$sock"
"$perf" server --rpc --dev "shm:path=$sock" --lcore "$server_cpu" --quiet &
server_pid=$!
for _ in $(seq 50); do [[ -S "$sock" ]] && break; sleep 0.05; done
rpc_size=$(( (size < 16 ? 16 : size) + 3 & ~3 ))  # RPC arguments: at least 16 bytes, XDR-aligned
run --rpc --mode lat --size "$rpc_size" --json "$out/rpc-lat.json"
run --rpc --mode bw --size "$rpc_size" --qd 32 --json "$out/rpc-bw-small.json"
run --rpc --mode bw --bulk 64K --bulk-dir read --qd 8 --json "$out/rpc-bw-64k-read.json"
run --rpc --mode bw --bulk 64K --bulk-dir write --qd 8 --json "$out/rpc-bw-64k-write.json"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=

echo >&2
echo "== summary" >&2
python3 - "$out" "$busy_before" "$ncpu" <<'PY' >&2
import json, os, sys
out, busy_before, ncpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = {n: json.load(open(os.path.join(out, n + ".json")))
     for n in ("lat", "bw-small", "bw-64k", "rpc-lat", "rpc-bw-small", "rpc-bw-64k-read", "rpc-bw-64k-write")}
def p50(n): return r[n]["latency_ns"]["p50"]
print(f"  round trip p50   raw SEND {p50('lat'):8.0f} ns   RPC {p50('rpc-lat'):8.0f} ns   "
      f"(one-way {p50('lat') / 2:.0f} / {p50('rpc-lat') / 2:.0f} ns)")
print(f"  RPC cost over the raw SEND: +{p50('rpc-lat') - p50('lat'):.0f} ns per round trip "
      f"({p50('rpc-lat') / p50('lat'):.2f}x)")
def rate(n): return r[n]["requests_per_s"]
print(f"  small messages   raw SEND {rate('bw-small'):12.0f} req/s   RPC {rate('rpc-bw-small'):12.0f} calls/s   "
      f"({rate('rpc-bw-small') / rate('bw-small'):.2f}x) at qd {r['bw-small']['qd']}")
print(f"  64 KiB           raw SEND {r['bw-64k']['gbps'] / 8:6.2f} GB/s   RPC read chunk "
      f"{r['rpc-bw-64k-read']['gbytes_per_s']:6.2f} GB/s   write chunk {r['rpc-bw-64k-write']['gbytes_per_s']:6.2f} GB/s")
busy = [n for n, j in r.items() if j.get("busy")]
if busy_before >= 10:
    print(f"  warning: the machine was {busy_before}% busy before the runs began ({ncpu} CPUs): other work competes "
          f"with the two pollers, and the figures are low")
if busy:
    print(f"  warning: the client had its CPU less than 90% of the time in: {', '.join(busy)} "
          f"(cpu_share in the JSON): the machine was busy, those figures are low")
if ncpu < 3:
    print(f"  note: {ncpu} CPUs for two busy-polling processes: anything else running shows in the figures")
PY
echo "JSON results in $out/" >&2
