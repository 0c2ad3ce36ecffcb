#!/usr/bin/env bash
# Tern next to UCX, read mode by mode (issue 26). This VM's cross-core
# cache-line round trip flips between a fast (~140-160 ns) and a slow
# (~600 ns) mode within a run, and every latency here moves with it; a median
# of per-case ratios (compare-ucx.sh) mixes the modes and can flatter. So this
# script runs many SHORT rounds, each interleaving
#   - UCX: uct posix am_lat, ucp_am_lat, ucp_am_bw (UCX_TLS=posix,self),
#   - tern-perf over pmd/shm: raw SEND round trip, RPC round trip (depth 1),
#     RPC rate at depth 32,
# with the cache-line round trip (bench/tern-cacheline) measured before and
# after every case; the order of the cases rotates from round to round. A
# case counts in a mode only when the cache line on both sides of it was in
# that mode; one that straddled a flip is "mixed" and left out of the
# per-mode figures (but counted). The fast/slow threshold is derived from the
# run's own cache-line samples (see the Python below: a two-class split of
# their logarithms, Otsu's criterion), so no figure is assumed.
# Per mode it prints each program's median and best, how many of its runs
# fell in that mode, and the ratios median-vs-median and best-vs-best (the
# issue's goals: RPC p50 <= 1.25x ucp_am_lat, raw SEND <= 1.0x uct am_lat,
# RPC depth-32 rate >= 0.6x ucp_am_bw one-way messages), plus each mode's
# RPC p99.9 in units of the machine's stall floor (bench/tern-noise, once).
# Installs ucx-utils (Debian) if missing. ~9 s a round with --seconds 0.5.
#   scripts/compare-ucx-modes.sh [--rounds N] [--seconds S] [--json FILE] [--raw DIR]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=12 seconds=0.5 json_out="" out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --raw) out=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "compare-ucx-modes.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
me=compare-ucx-modes.sh
# shellcheck source=scripts/ucx-common.sh
source "$top/scripts/ucx-common.sh"
ucx_prepare
[[ -n $out ]] || out=$(mktemp -d /tmp/tern-ucx-modes-XXXXXX)
mkdir -p "$out"
S=$(mktemp -u /tmp/tern-ucx-XXXXXX.sock)
port=$((15000 + RANDOM % 2000))
trap 'rm -f "$S"' EXIT
# ucx_perftest counts iterations, not time: ~2 M one-way messages/s at most.
iters=$(awk -v s="$seconds" 'BEGIN { printf "%d", s * 1000000 }')

run_case() {
  case $1 in
    uct_am_lat) ucx uct_am_lat am_lat -x posix -d memory ;;
    ucp_am_lat) ucx ucp_am_lat ucp_am_lat UCX_TLS=posix,self ;;
    ucp_am_bw) ucx ucp_am_bw ucp_am_bw UCX_TLS=posix,self ;;
    send_lat) tern send_lat "" "--mode lat --size 32" ;;
    rpc_lat) tern rpc_lat "--rpc" "--rpc --mode lat --size 32" ;;
    rpc_bw) tern rpc_bw "--rpc" "--rpc --mode bw --qd 32 --size 32" ;;
  esac
}

cases=(uct_am_lat send_lat ucp_am_lat rpc_lat ucp_am_bw rpc_bw)
n=${#cases[@]}
# One cache-line measurement between every two cases: the one after a case
# is the one before the next. 300 samples of 200 round trips: ~20-60 ms.
cl() { "$CL" --json --samples 300 >"$out/cl.$r.$1.json"; }
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds" >&2
  k=0
  cl 0
  for ((i = 0; i < n; ++i)); do
    c=${cases[$(((i + r - 1) % n))]}  # rotate, so no case always follows the same one
    echo "$k $c" >>"$out/order.$r"
    run_case "$c"
    k=$((k + 1))
    cl "$k"
  done
done
"$NOISE" --seconds 1 --json >"$out/noise.json" || true

python3 - "$out" "$rounds" "$json_out" <<'PY'
import json, math, statistics, sys
out, rounds, json_out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def clv(r, k):
    j = load(f"{out}/cl.{r}.{k}.json")
    return j['rtt_ns']['p50'] if j else None
# ucx_perftest -f: iterations, p50, average, overall (usec; one-way for the
# latency tests), bandwidth average, overall (MB/s), msg rate average, overall.
def ucx(name, r, col, scale):
    try:
        return scale * float(open(f"{out}/{name}.{r}").read().split()[col])
    except Exception:
        return None
def tern(name, r, get):
    j = load(f"{out}/{name}.{r}.json")
    try:
        return get(j) if j else None
    except Exception:
        return None
# what -> (case it comes from, getter, unit, better)
metrics = {
    'uct_am_lat_rtt_ns': ('uct_am_lat', lambda r: ucx('uct_am_lat', r, 1, 2000), 'ns', min),
    'ucp_am_lat_rtt_ns': ('ucp_am_lat', lambda r: ucx('ucp_am_lat', r, 1, 2000), 'ns', min),
    'ucp_am_bw_msgs_per_s': ('ucp_am_bw', lambda r: ucx('ucp_am_bw', r, 7, 1), '/s', max),
    'send_rtt_p50_ns': ('send_lat', lambda r: tern('send_lat', r, lambda j: j['latency_ns']['p50']), 'ns', min),
    'rpc_rtt_p50_ns': ('rpc_lat', lambda r: tern('rpc_lat', r, lambda j: j['latency_ns']['p50']), 'ns', min),
    'rpc_rtt_p99_9_ns': ('rpc_lat', lambda r: tern('rpc_lat', r, lambda j: j['latency_ns']['p99_9']), 'ns', min),
    'rpc_qd32_per_s': ('rpc_bw', lambda r: tern('rpc_bw', r, lambda j: j['requests_per_s']), '/s', max),
}
# Every cache-line sample of the run, for the threshold.
samples = []
for r in range(1, rounds + 1):
    k = 0
    while (v := clv(r, k)) is not None:
        samples.append(v)
        k += 1
# The threshold: sort the samples' logarithms and take the split that
# maximizes the between-class variance (Otsu's criterion in one dimension);
# log, because the modes differ by a factor, not by an offset. The split is
# a real second mode only if the two classes' medians differ by >= 1.5x;
# otherwise the whole run is one mode (named by its median: fast under
# 300 ns, the midpoint of the modes seen so far on this VM, else slow).
xs = sorted(samples)
ls = [math.log(x) for x in xs]
best, split = -1.0, None
for i in range(1, len(ls)):
    a, b = ls[:i], ls[i:]
    w = len(a) * len(b) / len(ls) ** 2
    bv = w * (statistics.fmean(a) - statistics.fmean(b)) ** 2
    if bv > best:
        best, split = bv, i
threshold = None
if split and statistics.median(xs[split:]) >= 1.5 * statistics.median(xs[:split]):
    threshold = math.sqrt(xs[split - 1] * xs[split])  # geometric middle of the gap
def mode_of(v):
    if threshold is None:
        return 'fast' if statistics.median(xs) < 300 else 'slow'
    return 'fast' if v < threshold else 'slow'
# Classify each case run by the cache line before and after it.
runs = []  # (round, case, mode, cl_before, cl_after)
for r in range(1, rounds + 1):
    try:
        order = [l.split() for l in open(f"{out}/order.{r}")]
    except Exception:
        continue
    for k, c in order:
        k = int(k)
        a, b = clv(r, k), clv(r, k + 1)
        if a is None or b is None:
            continue
        ma, mb = mode_of(a), mode_of(b)
        runs.append((r, c, ma if ma == mb else 'mixed', a, b))
modes = ('fast', 'slow', 'mixed')
counts = {c: {m: 0 for m in modes} for c in sorted({x[1] for x in runs})}
for _, c, m, _, _ in runs:
    counts[c][m] += 1
per_mode = {}
for m in ('fast', 'slow'):
    cls = [v for v in samples if mode_of(v) == m]
    pm = {'cacheline_rtt_ns': {'n': len(cls), 'median': statistics.median(cls) if cls else None,
                               'best': min(cls) if cls else None}}
    for name, (case, get, unit, better) in metrics.items():
        vals = [v for r, c, mm, _, _ in runs if c == case and mm == m for v in [get(r)] if v is not None]
        pm[name] = {'n': len(vals), 'values': vals,
                    'median': statistics.median(vals) if vals else None, 'best': better(vals) if vals else None}
    per_mode[m] = pm
def ratio(pm, a, b, key):
    x, y = pm[a][key], pm[b][key]
    return x / y if x and y else None
goals = [  # name, numerator, denominator, op, goal
    ('RPC p50 / ucp_am_lat round trip', 'rpc_rtt_p50_ns', 'ucp_am_lat_rtt_ns', '<=', 1.25),
    ('raw SEND p50 / uct am_lat round trip', 'send_rtt_p50_ns', 'uct_am_lat_rtt_ns', '<=', 1.0),
    ('RPC depth-32 rate / ucp_am_bw messages', 'rpc_qd32_per_s', 'ucp_am_bw_msgs_per_s', '>=', 0.6),
]
noise = load(f"{out}/noise.json")
floor_ns = None
if noise:
    # The stall floor: the longest gap length L such that, at the RPC's
    # round-trip rate, at least 0.1% of round trips meet a gap >= L on either
    # CPU (as compare-ucx.sh). No p99.9 can be under it.
    bounds = noise['bounds_ns']
    above = [sum(sum(c['gaps_per_s'][i] for c in noise['cpus']) for i in range(b, len(bounds)))
             for b in range(len(bounds))]
    rates = [tern('rpc_lat', r, lambda j: j['requests_per_s']) for r in range(1, rounds + 1)]
    rates = [x for x in rates if x]
    if rates:
        rate = statistics.median(rates)
        floor_ns = 0
        for b in range(len(bounds)):
            if above[b] / rate >= 0.001:
                floor_ns = bounds[b]
def fmt(v, unit):
    if v is None:
        return '-'
    return f"{v:.0f} ns" if unit == 'ns' else f"{v / 1e6:.2f} M/s"
print(f"{rounds} rounds, cases interleaved, 32-byte messages, peer on CPU 1, client on CPU 0")
print(f"cache-line round trips: {len(samples)} samples, {min(samples):.0f}-{max(samples):.0f} ns; ", end='')
if threshold:
    print(f"two modes, threshold {threshold:.0f} ns (Otsu split of log(ns))")
else:
    print(f"one mode only (no split with medians 1.5x apart); called {mode_of(xs[0])}")
print(f"\nruns per mode (a run is in a mode when the cache line before and after it was)")
print(f"{'case':14}" + ''.join(f"{m:>7}" for m in modes))
for c, cm in counts.items():
    print(f"{c:14}" + ''.join(f"{cm[m]:7d}" for m in modes))
for m in ('fast', 'slow'):
    pm = per_mode[m]
    if not pm['cacheline_rtt_ns']['n']:
        continue
    print(f"\n{m} mode: cache line median {pm['cacheline_rtt_ns']['median']:.0f} ns, best {pm['cacheline_rtt_ns']['best']:.0f} ns")
    print(f"  {'what':40} {'runs':>5} {'median':>11} {'best':>11}")
    for name, (case, get, unit, better) in metrics.items():
        e = pm[name]
        print(f"  {name:40} {e['n']:5d} {fmt(e['median'], unit):>11} {fmt(e['best'], unit):>11}")
    print(f"  {'goal':40} {'median':>8} {'best':>8} {'goal':>8}")
    pm['goals'] = {}
    for gname, a, b, op, g in goals:
        rm, rb = ratio(pm, a, b, 'median'), ratio(pm, a, b, 'best')
        ok = rb is not None and (rb <= g if op == '<=' else rb >= g)
        s = lambda v: f"{v:8.2f}" if v is not None else f"{'-':>8}"
        print(f"  {gname:40} {s(rm)} {s(rb)} {op + ' ' + str(g):>8}  {'met' if ok else 'short'} (best vs best)")
        pm['goals'][gname] = {'median_ratio': rm, 'best_ratio': rb, 'goal': f"{op} {g}"}
    p999 = pm['rpc_rtt_p99_9_ns']['median']
    if floor_ns and p999:
        print(f"  RPC p99.9 {p999 / 1e3:.1f} us = {p999 / floor_ns:.2f}x the machine's stall floor ({floor_ns / 1e3:.0f} us, tern-noise)")
        pm['rpc_p99_9_in_floor_units'] = p999 / floor_ns
if json_out:
    json.dump({'rounds': rounds, 'threshold_ns': threshold, 'cacheline_samples_ns': samples,
               'runs': [{'round': r, 'case': c, 'mode': m, 'cl_before_ns': a, 'cl_after_ns': b} for r, c, m, a, b in runs],
               'runs_per_mode': counts, 'per_mode': per_mode, 'stall_floor_ns': floor_ns}, open(json_out, 'w'), indent=1)
PY
echo "raw results in $out" >&2
