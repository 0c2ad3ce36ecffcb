#!/usr/bin/env bash
# Tern next to UCX on this host, in one run, pinned the same way (server or
# peer on CPU 1, client on CPU 0), 32-byte messages:
#   - the cache-line round trip between the two CPUs (bench/tern-cacheline),
#   - UCX: uct posix am_lat, ucp_am_lat (UCX_TLS=posix,self), ucp_am_bw,
#   - tern-perf over pmd/shm: raw SEND round trip and rate (depth 32),
#     RPC round trip and rate (depth 32),
#   - the machine's noise: how often a busy-polling CPU is taken away, and
#     for how long (bench/tern-noise), which bounds every p99.9 here,
#   - bulk RPCs: 64 KiB and 1 MiB through read and write chunks (depth 8)
#     next to a plain memcpy of the same sizes (bench/tern-memcpy),
#   - the engines' own CPU time per RPC, each side, the driver's share
#     subtracted (bench/tern-engine-cost, depth 1 and 32, one core),
# each ROUNDS times, alternating, and prints the medians and every figure
# issue 11 sets a goal for (docs/performance.md, "Tern next to UCX").
# Its cache-line-unit ratios are medians over rounds that may have run in
# different machine modes; scripts/compare-ucx-modes.sh compares the
# programs within one mode (docs/performance.md, issue 26).
# Installs ucx-utils (Debian) if missing. Needs an otherwise idle machine;
# about 50 s per round (--no-bulk: 30 s).
#   scripts/compare-ucx.sh [--rounds N] [--seconds S] [--no-bulk] [--json FILE]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 seconds=2 json_out="" bulk=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --no-bulk) bulk=0; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "compare-ucx.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
me=compare-ucx.sh
# shellcheck source=scripts/ucx-common.sh
source "$top/scripts/ucx-common.sh"
ucx_prepare
MEMCPY="$top/build-perf/bench/tern-memcpy"
COST="$top/build-perf/bench/tern-engine-cost"
out=$(mktemp -d /tmp/tern-ucx-XXXXXX)
S=$(mktemp -u /tmp/tern-ucx-XXXXXX.sock)
port=$((13000 + RANDOM % 2000))
trap 'rm -f "$S"' EXIT
iters=$((seconds * 500000))  # ucx_perftest counts iterations, not time

# The cache-line round trip right before each case: on a VM it can change
# by 4x within a run (the vCPUs' placement on the host), so every figure is
# also expressed in units of its own adjacent cache-line round trip.
cl() { "$CL" --json --samples 500 >"$out/cl.$1.$r.json"; }
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds" >&2
  cl uct_am_lat; ucx uct_am_lat am_lat -x posix -d memory
  cl send_lat; tern send_lat "" "--mode lat --size 32"
  cl ucp_am_lat; ucx ucp_am_lat ucp_am_lat UCX_TLS=posix,self
  cl rpc_lat; tern rpc_lat "--rpc" "--rpc --mode lat --size 32"
  cl ucp_am_bw; ucx ucp_am_bw ucp_am_bw UCX_TLS=posix,self
  cl send_bw; tern send_bw "" "--mode bw --qd 32 --size 32"
  cl rpc_bw; tern rpc_bw "--rpc" "--rpc --mode bw --qd 32 --size 32"
  "$NOISE" --seconds 1 --json >"$out/noise.$r.json"
  if ((bulk)); then
    for b in 64K 1M; do
      "$MEMCPY" --size $b --bufs 8 --cpu 0 --seconds 1 --json >"$out/memcpy_$b.$r.json"
      for d in read write; do
        tern "bulk_${d}_$b" "--rpc --max-bulk 1M" "--rpc --mode bw --qd 8 --bulk $b --bulk-dir $d --warmup 200"
      done
    done
  fi
  for qd in 1 32; do
    taskset -c 0 "$COST" --qd $qd --rounds 20 --calls 20000 --json "$out/cost_qd$qd.$r.json" >/dev/null 2>&1 ||
      echo "compare-ucx.sh: tern-engine-cost --qd $qd failed" >&2
  done
done

python3 - "$out" "$rounds" "$json_out" "$bulk" <<'PY'
import glob, json, statistics, sys
out, rounds, json_out, bulk = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == '1'
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else float('nan')
def cl(name, r):
    try:
        return json.load(open(f"{out}/cl.{name}.{r}.json"))['rtt_ns']['p50']
    except Exception:
        return None
def ucx(name, col, scale):
    # ucx_perftest -f: iterations, p50, average, overall (usec; one-way for latency tests),
    # bandwidth average, overall (MB/s), message rate average, overall (msg/s)
    v = []
    for r in range(1, rounds + 1):
        try:
            v.append((scale * float(open(f"{out}/{name}.{r}").read().split()[col]), cl(name, r)))
        except Exception:
            pass
    return v
def tern(name, get):
    v = []
    for r in range(1, rounds + 1):
        try:
            v.append((get(json.load(open(f"{out}/{name}.{r}.json"))), cl(name, r)))
        except Exception:
            pass
    return v
runs = {
    'uct_posix_am_lat_rtt_ns': ucx('uct_am_lat', 1, 2000),
    'ucp_am_lat_rtt_ns': ucx('ucp_am_lat', 1, 2000),
    'ucp_am_bw_msgs_per_s': ucx('ucp_am_bw', 7, 1),
    'send_rtt_p50_ns': tern('send_lat', lambda j: j['latency_ns']['p50']),
    'send_rtt_p99_9_ns': tern('send_lat', lambda j: j['latency_ns']['p99_9']),
    'send_qd32_per_s': tern('send_bw', lambda j: j['requests_per_s']),
    'rpc_rtt_p50_ns': tern('rpc_lat', lambda j: j['latency_ns']['p50']),
    'rpc_rtt_p99_9_ns': tern('rpc_lat', lambda j: j['latency_ns']['p99_9']),
    'rpc_qd32_per_s': tern('rpc_bw', lambda j: j['requests_per_s']),
}
f = {k: med([x for x, _ in v]) for k, v in runs.items()}
# In cache-line units: a latency / its adjacent cache-line round trip; a
# rate x its adjacent cache-line round trip (messages per cache-line RTT).
u = {}
for k, v in runs.items():
    if k.endswith('_ns'):
        u[k] = med([x / c for x, c in v if c])
    else:
        u[k] = med([x * c * 1e-9 for x, c in v if c])
cls = [c for c in (json.load(open(p))['rtt_ns']['p50'] for p in glob.glob(f"{out}/cl.*.json"))]
f['cacheline_rtt_ns'] = med(cls)
print(f"medians of {rounds} rounds (server/peer on CPU 1, client on CPU 0, 32-byte messages)")
print(f"cache-line round trip before each case: median {med(cls):.0f} ns, from {min(cls):.0f} to {max(cls):.0f} ns")
if max(cls) > 1.5 * min(cls):
    print("  (it moved during the run: the machine changed mode; compare the cache-line units, not the ns)")
print(f"\n{'what':44} {'figure':>14}  {'in its cache-line RTTs':>22}")
rows = [
    ('UCX uct posix am_lat, round trip (2x one-way)', 'uct_posix_am_lat_rtt_ns'),
    ('UCX ucp_am_lat, round trip (2x one-way)', 'ucp_am_lat_rtt_ns'),
    ('tern-perf raw SEND, round trip p50', 'send_rtt_p50_ns'),
    ('tern-perf RPC, round trip p50', 'rpc_rtt_p50_ns'),
    ('tern-perf RPC, round trip p99.9', 'rpc_rtt_p99_9_ns'),
    ('UCX ucp_am_bw, one-way messages', 'ucp_am_bw_msgs_per_s'),
    ('tern-perf raw SEND, depth 32', 'send_qd32_per_s'),
    ('tern-perf RPC, depth 32', 'rpc_qd32_per_s'),
]
for name, k in rows:
    v = f[k]
    val = f"{v:11.0f} ns" if k.endswith('_ns') else f"{v / 1e6:10.2f} M/s"
    unit = f"{u[k]:10.2f} RTTs" if k.endswith('_ns') else f"{u[k]:8.3f} per RTT"
    print(f"{name:44} {val:>14}  {unit:>22}")
# The noise floor: gaps per second on each CPU by length (tern-noise). A
# round trip is delayed by a gap on either CPU while it is in flight; at
# R round trips per second about (gaps >= L per s, both CPUs) / R of them
# wait at least L. The floor is the longest L for which that share passes
# 0.1%: no p99.9 measured here can be under it.
noise = [n for n in (load(f"{out}/noise.{r}.json") for r in range(1, rounds + 1)) if n]
floor_ns, gaps30 = float('nan'), float('nan')
if noise:
    bounds = noise[0]['bounds_ns']
    per_bucket = [med([sum(c['gaps_per_s'][b] for c in n['cpus']) for n in noise]) for b in range(len(bounds))]
    above = [sum(per_bucket[b:]) for b in range(len(bounds))]  # gaps >= bounds[b] per s, both CPUs
    rpc_rate = med([j['requests_per_s'] for j in (load(f"{out}/rpc_lat.{r}.json") for r in range(1, rounds + 1)) if j])
    floor_ns = 0
    for b in range(len(bounds)):
        if rpc_rate and above[b] / rpc_rate >= 0.001:
            floor_ns = bounds[b]
    gaps30 = above[bounds.index(30000)] if 30000 in bounds else float('nan')
    lost = med([max(c['lost_pct'] for c in n['cpus']) for n in noise])
    print(f"\nmachine noise (tern-noise, both CPUs): {above[0]:.0f} gaps >= 1 us per second, {gaps30:.0f} >= 30 us; "
          f"up to {lost:.1f}% of a CPU lost")
    print(f"  at the RPC's {rpc_rate / 1e3:.0f} K round trips/s, the p99.9 floor is {floor_ns / 1e3:.0f} us "
          f"(no p99.9 here can be under it)")
    f['noise'] = {'gaps_per_s_at_least': dict(zip([str(b) for b in bounds], above)), 'lost_pct': lost,
                  'p99_9_floor_ns': floor_ns}
# Bulk through chunks next to memcpy of the same size (GB/s of payload).
bulk_rows = []
if bulk:
    print(f"\n{'bulk RPCs, depth 8':44} {'GB/s':>8} {'memcpy GB/s':>12} {'ratio':>7}")
    for b in ('64K', '1M'):
        mc = med([j['gbytes_per_s'] for j in (load(f"{out}/memcpy_{b}.{r}.json") for r in range(1, rounds + 1)) if j])
        for d in ('read', 'write'):
            v = med([j['gbytes_per_s'] for j in (load(f"{out}/bulk_{d}_{b}.{r}.json") for r in range(1, rounds + 1)) if j])
            bulk_rows.append((f"{b} {d} chunk throughput / memcpy", v / mc if mc else float('nan')))
            print(f"{b + ' through ' + d + ' chunks':44} {v:8.2f} {mc:12.2f} {v / mc if mc else float('nan'):7.2f}")
            f[f'bulk_{d}_{b}_gbytes_per_s'] = v
        f[f'memcpy_{b}_gbytes_per_s'] = mc
# The engines' own CPU time per RPC (one core: no line crosses cores).
cost = {}
for qd in (1, 32):
    js = [j for j in (load(f"{out}/cost_qd{qd}.{r}.json") for r in range(1, rounds + 1)) if j]
    if js:
        cost[qd] = {k: med([j[k] for j in js]) for k in js[0] if k.endswith('_ns') and not isinstance(js[0][k], list)}
if cost:
    print(f"\n{'CPU time per RPC (one core, 32-byte echo)':44} {'client':>8} {'server':>8}")
    for qd, c in cost.items():
        print(f"{'depth %d: RPC' % qd:44} {c['rpc_client_ns']:6.0f} ns {c['rpc_server_ns']:6.0f} ns")
        print(f"{'depth %d: driver only (same Sends)' % qd:44} {c['raw_client_ns']:6.0f} ns {c['raw_server_ns']:6.0f} ns")
        print(f"{'depth %d: the engine own (RPC - driver)' % qd:44} {c['engine_client_ns']:6.0f} ns {c['engine_server_ns']:6.0f} ns")
    f['engine_cost'] = {str(k): v for k, v in cost.items()}
goals = [
    ('RPC p50 / ucp_am_lat round trip', u['rpc_rtt_p50_ns'] / u['ucp_am_lat_rtt_ns'], '<=', 0.75),
    ('RPC p50 / cache-line round trip', u['rpc_rtt_p50_ns'], '<=', 2.0),
    ('RPC p99.9 / RPC p50', f['rpc_rtt_p99_9_ns'] / f['rpc_rtt_p50_ns'], '<=', 3.0),
    ('raw SEND p50 / cache-line round trip', u['send_rtt_p50_ns'], '<=', 1.3),
    ('RPC depth-32 rate / ucp_am_bw rate', u['rpc_qd32_per_s'] / u['ucp_am_bw_msgs_per_s'], '>=', 1.0),
] + [(n, v, '>=', 0.8) for n, v in bulk_rows]
for qd, c in cost.items():
    goals.append((f'engine ns per RPC, client side, depth {qd}', c['engine_client_ns'], '<=', 150))
    goals.append((f'engine ns per RPC, server side, depth {qd}', c['engine_server_ns'], '<=', 150))
print(f"\n{'issue 11 goal (latencies in cache-line units)':44} {'measured':>9} {'goal':>8}")
for name, v, op, g in goals:
    ok = v <= g if op == '<=' else v >= g
    note = ''
    if name.startswith('RPC p99.9') and not ok and floor_ns == floor_ns and f['rpc_rtt_p99_9_ns'] <= 1.5 * max(floor_ns, 1):
        note = f' (the machine floor is {floor_ns / 1e3:.0f} us)'
    print(f"{name:44} {v:9.2f} {op + ' ' + str(g):>8}  {'met' if ok else 'short'}{note}")
f['in_cacheline_units'] = u
f['goals'] = {n: {'measured': v, 'goal': f"{op} {g}"} for n, v, op, g in goals}
if json_out:
    json.dump(f, open(json_out, 'w'), indent=1)
PY
echo "raw results in $out" >&2
