#!/usr/bin/env bash
# docs/performance.md "Connections at scale": tern-scale (bench/tern_scale.cc)
# for 1, 16, 256, 1,024 and 10,000 connections -- one server engine with
# default options on CPU 1 (past 4,096 connections its receive pool and arena
# sized for them), the connections' client engines on CPU 0 (one process
# per 2,000 connections), every connection making calls (inline echoes and
# every 8th a 64 KiB read or write chunk), every reply checked. Prints
# tern-scale's line per count (rate, p50/p99/p99.9, failures, the server's
# memory per idle connection) and keeps each run's JSON in the output
# directory. Fails if any run does. 10,000 connections need ~10,100 open
# files in the server (RLIMIT_NOFILE's hard limit; tern-scale raises the
# soft one) and ~2 GiB of memory for the clients' arenas.
#   scripts/measure-scale.sh [--seconds S] [--conns "1 16 256 1024 10000"] [OUTDIR]
#   scripts/measure-scale.sh --footprint [OUTDIR]
# Builds build-perf/ in release first. Run it on an otherwise idle machine.
# --footprint counts instead of timing (any load will do): the server's
# instructions and cache misses per inline call at 16 and at 1,024
# connections (callgrind --cache-sim=yes; runs of 4 and 12 s each, the
# difference per call, scripts/scale_footprint.py) -- where the per-call
# cost grows with connections, function by function.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
seconds=5 conns="1 16 256 1024 10000" footprint=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --footprint) footprint=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "measure-scale.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-$(mktemp -d /tmp/tern-scale-XXXXXX)}
mkdir -p "$out"
"$top/scripts/setup.sh"
"$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
S="$top/build-perf/bench/tern-scale"
echo "commit $(git -C "$top" rev-parse --short HEAD); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $footprint == 1 ]]; then
  for n in 16 1024; do
    for kind in short long; do
      s=4; [[ $kind == long ]] && s=12
      valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out/cg.$n.$kind.%p" \
        "$S" --conns "$n" --seconds "$s" --bulk-every 0 >"$out/run.$n.$kind" 2>&1
      awk '/^ *[0-9]+ conns /{print $3}' "$out/run.$n.$kind" >"$out/calls.$n.$kind"
    done
  done
  python3 "$top/scripts/scale_footprint.py" "$out" 16 1024
  exit 0
fi
rc=0
for n in $conns; do
  "$S" --conns "$n" --seconds "$seconds" --json "$out/scale-$n.json" || rc=1
done
echo "JSON in $out"
exit $rc
