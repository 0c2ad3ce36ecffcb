#!/usr/bin/env bash
# What the engine's wait mode costs and saves, side by side in one run:
# tern-perf --rpc over shm, server and client both busy-polling, then both in
# wait mode (--wait), alternating for --rounds rounds. For each: the client's
# round-trip p50/p99 (--mode lat, one call at a time), the CPU seconds the
# server and the client used during that run, and the server's CPU seconds
# over an idle --idle seconds before it. Medians per mode at the end.
#   scripts/measure-wait.sh [--rounds N] [--seconds S] [--idle S] [--build DIR]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 seconds=2 idle=2 build=build-release
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--seconds S] [--idle S] [--build DIR]" >&2; exit 2 ;;
  esac
done
[[ -x "$top/$build/apps/tern-perf" ]] || "$top/scripts/build.sh" "$build" -Dbuildtype=release -Dbenchmarks=false
perf="$top/$build/apps/tern-perf"
out=$(mktemp -d /tmp/tern-wait-XXXXXX)
server_pid=
cleanup() { [[ -n "$server_pid" ]] && { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; } || true; }
trap cleanup EXIT

# CPU seconds (user + system) a process has used so far.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

one() {  # one(mode, round): mode busy | wait
  local mode=$1 r=$2 flag=
  [[ $mode == wait ]] && flag=--wait
  local sock=/tmp/tern-wait-$$-$mode-$r.sock
  "$perf" server --rpc $flag --dev "shm:path=$sock" --lcore 1 --quiet &
  server_pid=$!
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
  local c0; c0=$(cpu_of "$server_pid")
  sleep "$idle"
  local c1; c1=$(cpu_of "$server_pid")
  # The client's CPU time, from its rusage (no time(1) needed).
  python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime} {r.ru_stime}\n")' "$out/$mode-$r.time" \
    "$perf" client --rpc $flag --dev "shm:path=$sock" --lcore 0 --mode lat --seconds "$seconds" \
    --json "$out/$mode-$r.json" --quiet
  local c2; c2=$(cpu_of "$server_pid")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
  rm -f "$sock"
  python3 - "$out/$mode-$r.json" "$out/$mode-$r.time" "$mode" "$c0" "$c1" "$c2" "$idle" <<'PY' | tee -a "$out/rows"
import json, sys
j = json.load(open(sys.argv[1]))
u, s = map(float, open(sys.argv[2]).read().split()[-2:])
mode, c0, c1, c2, idle = sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
lat = j["latency_ns"]
print(f"{mode} p50_ns={lat['p50']:.0f} p99_ns={lat['p99']:.0f} rate={j['requests_per_s']:.0f} "
      f"server_idle_cpu_s={c1 - c0:.3f}/{idle:g} server_run_cpu_s={c2 - c1:.3f} client_cpu_s={u + s:.3f}")
PY
}

echo "tern-perf --rpc --mode lat over shm, $rounds rounds of ${seconds}s (server idle ${idle}s first), busy vs --wait:"
for r in $(seq "$rounds"); do
  one busy "$r"
  one wait "$r"
done
python3 - "$out/rows" <<'PY'
import statistics, sys, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    mode, *kv = line.split()
    for f in kv:
        k, v = f.split("=")
        rows[mode][k].append(float(v.split("/")[0]))
print("\nmedians:")
for mode in ("busy", "wait"):
    m = {k: statistics.median(v) for k, v in rows[mode].items()}
    print(f"  {mode:4}  p50 {m['p50_ns']:8.0f} ns  p99 {m['p99_ns']:8.0f} ns  {m['rate']:8.0f} RPC/s  "
          f"server idle CPU {m['server_idle_cpu_s']:.3f} s  server run CPU {m['server_run_cpu_s']:.3f} s  "
          f"client CPU {m['client_cpu_s']:.3f} s")
b = {k: statistics.median(v) for k, v in rows["busy"].items()}
w = {k: statistics.median(v) for k, v in rows["wait"].items()}
print(f"  wait/busy: p50 {w['p50_ns'] / b['p50_ns']:.2f}x, p99 {w['p99_ns'] / b['p99_ns']:.2f}x, "
      f"rate {w['rate'] / b['rate']:.2f}x, server CPU when idle {w['server_idle_cpu_s'] / max(b['server_idle_cpu_s'], 1e-3):.3f}x")
PY
