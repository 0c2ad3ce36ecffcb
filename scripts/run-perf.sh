#!/usr/bin/env bash
# The main job: installs what is missing, builds Tern (release), then runs a
# tern-perf server and client over the shm driver, pinned to two cores, and
# prints latency and throughput reports: raw driver SENDs first (the
# baseline), then RPC calls through the engine (--rpc), inline and with 64 KiB
# through read and write chunks.
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
echo >&2
echo "JSON results in $out/" >&2
