#!/usr/bin/env bash
# Reproduces docs/performance.md's "RPC engine over pmd/shm" figures: raw SEND
# echo and RPC calls (inline, and 4 KiB / 64 KiB / 1 MiB through read and
# write chunks), one fresh tern-perf server per client run, server on CPU 1,
# client on CPU 0. Results: one JSON and one table per run in the output dir.
# Run it on an otherwise idle machine; it takes about a minute.
#   scripts/measure-rpc.sh [OUTDIR]      (builds build-perf/ in release first)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(mktemp -d /tmp/tern-measure-XXXXXX)}
mkdir -p "$out"
"$top/scripts/setup.sh"
"$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
P="$top/build-perf/apps/tern-perf"
S=$(mktemp -u /tmp/tern-measure-XXXXXX.sock)
trap 'rm -f "$S"' EXIT

run() {  # name, server args, client args
  local name=$1 sargs=$2 cargs=$3 sp
  rm -f "$S"
  # shellcheck disable=SC2086
  "$P" server $sargs --dev "shm:path=$S" --lcore 1 --once --quiet &
  sp=$!
  for _ in $(seq 100); do [[ -S $S ]] && break; sleep 0.02; done
  # shellcheck disable=SC2086
  "$P" client $cargs --dev "shm:path=$S" --lcore 0 --quiet --json "$out/$name.json" >"$out/$name.txt" 2>&1
  wait "$sp" 2>/dev/null || true
  echo "$name: $(head -3 "$out/$name.txt" | tail -2 | tr -s ' ' | tr '\n' ' ')" >&2
  sleep 1
}
run send_lat "" "--mode lat --size 32 --seconds 3"
run rpc_lat "--rpc" "--rpc --mode lat --size 32 --seconds 3"
run send_bw "" "--mode bw --qd 32 --size 32 --seconds 3"
run rpc_bw "--rpc" "--rpc --mode bw --qd 32 --size 32 --seconds 3"
for B in 4K 64K 1M; do
  for D in read write; do
    W=1000
    [[ $B == 1M ]] && W=200
    run "rpc_lat_${B}_$D" "--rpc" "--rpc --mode lat --bulk $B --bulk-dir $D --seconds 2 --warmup $W"
    run "rpc_bw_${B}_$D" "--rpc" "--rpc --mode bw --qd 8 --bulk $B --bulk-dir $D --seconds 2 --warmup $W"
  done
done
run send_lat2 "" "--mode lat --size 32 --seconds 3"
run rpc_lat2 "--rpc" "--rpc --mode lat --size 32 --seconds 3"
echo "results in $out" >&2
