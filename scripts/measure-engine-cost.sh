#!/usr/bin/env bash
# The engine's own work per RPC at depth 1, each side, in figures that
# repeat from run to run:
#   1. CPU time: bench/tern-engine-cost (both engines on one core; RPC and
#      driver-only blocks alternated, stalled passes left out; engine = RPC
#      - driver, per pair of blocks), RUNS separate runs; each run's median
#      and the spread over the runs,
#   2. cycles and instructions from the CPU's counters (perf stat), if this
#      machine has them (a VM without a virtual PMU has not: said so),
#   3. instructions, conditional branches and mispredictions, loads and
#      stores per side, the engine's own and pmd/shm's apart
#      (scripts/measure-cost.sh --sides: callgrind, load-independent),
#   4. cache lines touched per side and stores to shared memory
#      (scripts/lines_touched.py: a valgrind lackey trace, load-independent).
#   scripts/measure-engine-cost.sh [--runs N] [--qd N] [--no-valgrind]
# ~10 s a run of (1) when idle; (2) and (3) take a few minutes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
runs=5 qd=1 valgrind=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --qd) qd=$2; shift 2 ;;
    --no-valgrind) valgrind=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "measure-engine-cost.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
"$top/scripts/setup.sh"
"$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
COST="$top/build-perf/bench/tern-engine-cost"
tmp=$(mktemp -d /tmp/tern-engine-cost-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (wall-clock figures mean little above ~3 on this 2-CPU machine)"
echo
echo "1. CPU time per RPC, depth $qd, one core (tern-engine-cost, $runs runs)"
for ((i = 1; i <= runs; ++i)); do
  taskset -c 0 "$COST" --qd "$qd" --json "$tmp/run.$i.json" >/dev/null
done
python3 - "$tmp" "$runs" <<'PY'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
js = [json.load(open(f"{tmp}/run.{i}.json")) for i in range(1, runs + 1)]
print(f"  {'run':>4} {'RPC client':>11} {'server':>7} {'driver client':>14} {'server':>7} {'engine client':>14} {'server':>7} {'pairs p25-p75 (c / s)':>24}")
for i, j in enumerate(js, 1):
    q = lambda k: f"{j[k][0]:.0f}-{j[k][1]:.0f}"
    print(f"  {i:4d} {j['rpc_client_ns']:8.0f} ns {j['rpc_server_ns']:7.0f} {j['raw_client_ns']:11.0f} ns {j['raw_server_ns']:7.0f}"
          f" {j['engine_client_ns']:11.0f} ns {j['engine_server_ns']:7.0f} {q('engine_client_p25_p75_ns') + ' / ' + q('engine_server_p25_p75_ns'):>24}")
for side in ('client', 'server'):
    v = [j[f'engine_{side}_ns'] for j in js]
    m = statistics.median(v)
    print(f"  the engine's own, {side}: median {m:.0f} ns over {runs} runs, {min(v):.0f}-{max(v):.0f} "
          f"({100 * (min(v) - m) / m:+.1f}% / {100 * (max(v) - m) / m:+.1f}%)")
PY
echo
echo "2. CPU counters:"
if perf stat -x, -e cycles,instructions true 2>&1 | grep -q "not supported\|not counted"; then
  echo "  perf stat: cycles and instructions not supported on this machine (no PMU in the VM); the"
  echo "  instruction counts below are callgrind's, the time above the TSC's"
elif command -v perf >/dev/null; then
  taskset -c 0 perf stat -e cycles,instructions,branches,branch-misses "$COST" --qd "$qd" --rounds 20 2>&1 | sed 's/^/  /'
else
  echo "  perf not installed"
fi
((valgrind)) || exit 0
echo
echo "3. instructions, branches, loads and stores per RPC and side (callgrind; the 'total' rows)"
"$top/scripts/measure-cost.sh" --sides | sed 's/^/  /'
echo
echo "4. cache lines per RPC and side (valgrind lackey)"
python3 "$top/scripts/lines_touched.py" "$top/build-perf/bench/tern-rpc-cost" 200 | sed 's/^/  /'
