#!/usr/bin/env bash
# docs/performance.md "Many peers: fairness and isolation": tern-fairness
# (bench/tern_fairness.cc) -- one server engine with default options on
# CPU 1, 64 client processes on CPU 0, one of them noisy (10x the calls in
# flight the quiet ones keep); solo and noisy phases alternate in one run,
# --rounds times. Run once with the noisy client on one connection (the
# credit grant caps it) and once spread over 10 connections (as a noisy
# client may). Prints tern-fairness's table per run (Jain's index over the
# quiet clients' rates, their p99 noisy / solo) and keeps each run's JSON.
# Then tern-isolation-measure, when built (-Dtests=true): a well-behaved
# client's 64 KiB GET/PUT and echo p99 with a peer holding the connection
# table and a peer flooding the duplicate request cache, and beside two
# plain processes that are no peers (a CPU spinner and a memory walker: what
# the shared machine alone does).
#   scripts/measure-fairness.sh [--seconds S] [--rounds R] [--unpinned] [OUTDIR]
# --unpinned lets the kernel place the server and the clients (on a machine
# shared with other work, a pinned server waits behind whatever else runs
# on its core). Quiet windows of 1 and 4 calls in flight, the noisy client
# on 1 and on 10 connections: four runs.
# Builds build-perf/ in release first. Run it on an otherwise idle machine.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
seconds=2 rounds=3 pin=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --unpinned) pin=(--server-cpu -1 --client-cpu -1); shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "measure-fairness.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-$(mktemp -d /tmp/tern-fairness-XXXXXX)}
mkdir -p "$out"
"$top/scripts/setup.sh"
[[ -f "$top/build-perf/build.ninja" ]] || meson setup "$top/build-perf" -Dbuildtype=release >/dev/null
meson configure "$top/build-perf" -Dbuildtype=release -Dbenchmarks=true -Dtests=true >/dev/null
ninja -C "$top/build-perf" bench/tern-fairness tests/functional/tern-isolation-measure >/dev/null
echo "commit $(git -C "$top" rev-parse --short HEAD); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
F="$top/build-perf/bench/tern-fairness"
rc=0
for w in 1 4; do
  for nc in 1 10; do
    "$F" --clients 64 --window "$w" --noisy-factor 10 --noisy-conns "$nc" --seconds "$seconds" \
      --rounds "$rounds" "${pin[@]}" --json "$out/fairness-w$w-conns$nc.json" || rc=1
  done
done
# Isolation: one run per round (each opens ~1,000 connections), medians by hand.
I="$top/build-perf/tests/functional/tern-isolation-measure"
for r in $(seq 1 "$rounds"); do
  "$I" --seconds "$seconds" --json "$out/isolation-$r.json" || rc=1
done
echo "JSON in $out"
exit $rc
