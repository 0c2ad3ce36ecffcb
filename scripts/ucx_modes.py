#!/usr/bin/env python3
# The analysis behind scripts/compare-ucx-modes.sh: reads a run's raw
# results, sorts the machine's states out of the cache-line round trips
# measured between the cases, files every case run under the state it ran
# in, and prints per state each program's figures and the ratios.
#
#   ucx_modes.py RAWDIR [--json FILE]     analyze a run (compare-ucx-modes.sh does this)
#   ucx_modes.py --pack RAWDIR            print the run's figures as one JSON (a test fixture)
#   ucx_modes.py --self-test FIXTURE...   check the classifier on recorded runs
#
# The states: on this VM the cross-core cache-line round trip sits near
# ~50, ~110 or ~490 ns (three states of the vCPUs' placement on the host),
# and every latency moves with it. The classes are cut from the run's own
# samples: the 1-, 2- or 3-way split of their logarithms with the least
# within-class variance (Otsu's criterion, which is the same thing), taking
# the most classes whose neighbours' medians are at least MIN_RATIO apart.
# Only the names come from what this VM has shown: each class is called by
# the nearest (in log) of short ~50, fast ~120, slow ~500 ns.
import json
import math
import os
import statistics
import sys

MIN_RATIO = 1.5
NAMES = (('short', 50.0), ('fast', 120.0), ('slow', 500.0))
CASES = ('uct_am_lat', 'send_lat', 'ucp_am_lat', 'rpc_lat', 'ucp_am_bw', 'rpc_bw', 'noise')

# what -> (case it comes from, field in the packed figures, unit, better)
METRICS = {
    'uct_am_lat_rtt_ns': ('uct_am_lat', 'rtt_ns', 'ns', min),
    'ucp_am_lat_rtt_ns': ('ucp_am_lat', 'rtt_ns', 'ns', min),
    'ucp_am_bw_msgs_per_s': ('ucp_am_bw', 'msgs_per_s', '/s', max),
    'send_rtt_p50_ns': ('send_lat', 'p50_ns', 'ns', min),
    'send_rtt_p99_9_ns': ('send_lat', 'p99_9_ns', 'ns', min),
    'rpc_rtt_p50_ns': ('rpc_lat', 'p50_ns', 'ns', min),
    'rpc_rtt_p99_9_ns': ('rpc_lat', 'p99_9_ns', 'ns', min),
    'rpc_qd32_per_s': ('rpc_bw', 'per_s', '/s', max),
}
GOALS = [  # name, numerator, denominator, op, goal
    ('RPC p50 / ucp_am_lat round trip', 'rpc_rtt_p50_ns', 'ucp_am_lat_rtt_ns', '<=', 1.25),
    ('raw SEND p50 / uct am_lat round trip', 'send_rtt_p50_ns', 'uct_am_lat_rtt_ns', '<=', 1.0),
    ('RPC depth-32 rate / ucp_am_bw messages', 'rpc_qd32_per_s', 'ucp_am_bw_msgs_per_s', '>=', 0.6),
]


def _load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return None


def _ucx(path, col, scale):
    # ucx_perftest -f: iterations, p50, average, overall (usec; one-way for
    # the latency tests), bandwidth average, overall (MB/s), msg rate average, overall.
    try:
        with open(path) as f:
            return scale * float(f.read().split()[col])
    except Exception:
        return None


def pack(raw):
    """The figures of a raw run directory, as one dict (what analyze() reads)."""
    rounds = []
    r = 1
    while os.path.exists(f"{raw}/order.{r}"):
        cl = []
        k = 0
        while (j := _load(f"{raw}/cl.{r}.{k}.json")) is not None:
            cl.append(j['rtt_ns']['p50'])
            k += 1
        with open(f"{raw}/order.{r}") as f:
            order = [line.split()[1] for line in f if line.strip()]
        fig = {}
        for c in set(order):
            if c in ('uct_am_lat', 'ucp_am_lat'):
                v = _ucx(f"{raw}/{c}.{r}", 1, 2000)
                fig[c] = {'rtt_ns': v} if v is not None else {}
            elif c == 'ucp_am_bw':
                v = _ucx(f"{raw}/{c}.{r}", 7, 1)
                fig[c] = {'msgs_per_s': v} if v is not None else {}
            elif c == 'noise':
                j = _load(f"{raw}/noise.{r}.json")
                fig[c] = {'noise': j} if j else {}
            else:
                j = _load(f"{raw}/{c}.{r}.json")
                d = {}
                if j:
                    d['per_s'] = j.get('requests_per_s')
                    if 'latency_ns' in j:
                        d['p50_ns'] = j['latency_ns']['p50']
                        d['p99_9_ns'] = j['latency_ns']['p99_9']
                fig[c] = d
        rounds.append({'cl': cl, 'order': order, 'figures': fig})
        r += 1
    return {'rounds': rounds, 'noise': _load(f"{raw}/noise.json")}


def classes_of(samples, min_ratio=MIN_RATIO, kmax=3):
    """Split cache-line samples into up to kmax classes.

    Returns [{'name', 'lo', 'hi', 'median', 'n'}] in rising order, with the
    thresholds between neighbours (geometric middle of each gap)."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return [], []
    ls = [math.log(x) for x in xs]
    s1, s2 = [0.0], [0.0]
    for v in ls:
        s1.append(s1[-1] + v)
        s2.append(s2[-1] + v * v)

    def sse(i, j):  # within-class sum of squares of ls[i:j]
        m = j - i
        return s2[j] - s2[i] - (s1[j] - s1[i]) ** 2 / m

    def best_split(k):
        if k == 2:
            cands = ((sse(0, i) + sse(i, n), (i,)) for i in range(1, n))
        else:
            cands = ((sse(0, i) + sse(i, j) + sse(j, n), (i, j)) for i in range(1, n - 1) for j in range(i + 1, n))
        return min(cands, default=(None, None))[1]

    cuts = ()
    for k in range(min(kmax, n), 1, -1):
        c = best_split(k)
        if c is None:
            continue
        bounds = (0,) + c + (n,)
        meds = [statistics.median(xs[a:b]) for a, b in zip(bounds, bounds[1:])]
        if all(hi >= min_ratio * lo for lo, hi in zip(meds, meds[1:])):
            cuts = c
            break
    bounds = (0,) + tuple(cuts) + (n,)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        seg = xs[a:b]
        med = statistics.median(seg)
        name = min(NAMES, key=lambda nm: abs(math.log(med / nm[1])))[0]
        out.append({'name': name, 'lo': seg[0], 'hi': seg[-1], 'median': med, 'n': len(seg)})
    # Two classes near the same reference keep apart by an index.
    seen = {}
    for c in out:
        seen[c['name']] = seen.get(c['name'], 0) + 1
    for nm, cnt in seen.items():
        if cnt > 1:
            i = 0
            for c in out:
                if c['name'] == nm:
                    i += 1
                    c['name'] = f"{nm}{i}"
    thresholds = [math.sqrt(xs[c - 1] * xs[c]) for c in cuts]
    return out, thresholds


def class_of(v, classes, thresholds):
    for c, t in zip(classes, thresholds):
        if v < t:
            return c['name']
    return classes[-1]['name']


def stall_floor(noise_runs, rate):
    """The machine's stall floor for round trips at `rate` per second.

    From tern-noise (one pinned thread per CPU timing its own loop; a gap of
    >= 1 us between two clock readings is time the CPU was taken away): the
    longest gap length L among its bucket bounds such that the gaps >= L per
    second on both CPUs together, divided by the round trips per second, is
    at least 0.1% -- that share of round trips meets a stall of at least L,
    so no p99.9 can be under L. 0 when even the 1-us bucket stays under 0.1%.
    With several noise runs, each bucket's median over them."""
    runs = [n for n in noise_runs if n]
    if not runs or not rate:
        return None
    bounds = runs[0]['bounds_ns']
    per_b = [statistics.median([sum(c['gaps_per_s'][b] for c in n['cpus']) for n in runs]) for b in range(len(bounds))]
    floor = 0
    for b in range(len(bounds)):
        if sum(per_b[b:]) / rate >= 0.001:
            floor = bounds[b]
    return floor


def analyze(data):
    rounds = data['rounds']
    samples = [v for rd in rounds for v in rd['cl']]
    classes, thresholds = classes_of(samples)
    names = [c['name'] for c in classes]
    mode = lambda v: class_of(v, classes, thresholds)
    runs = []  # {round, case, mode, before, after, figures}
    for ri, rd in enumerate(rounds, 1):
        for k, c in enumerate(rd['order']):
            if k + 1 >= len(rd['cl']):
                continue
            a, b = rd['cl'][k], rd['cl'][k + 1]
            ma, mb = mode(a), mode(b)
            runs.append({'round': ri, 'case': c, 'mode': ma if ma == mb else 'mixed',
                         'from_to': f"{ma}->{mb}", 'cl_before_ns': a, 'cl_after_ns': b,
                         'figures': rd['figures'].get(c, {})})
    cols = names + ['mixed']
    counts = {}
    for r in runs:
        counts.setdefault(r['case'], {m: 0 for m in cols})[r['mode']] += 1
    all_noise = [r['figures'].get('noise') for r in runs if r['case'] == 'noise'] or [data.get('noise')]
    all_rates = [r['figures'].get('per_s') for r in runs if r['case'] == 'rpc_lat' and r['figures'].get('per_s')]
    per_mode = {}
    for m in names:
        cls = [v for v in samples if mode(v) == m]
        pm = {'cacheline_rtt_ns': {'n': len(cls), 'median': statistics.median(cls), 'best': min(cls)}}
        for name, (case, field, unit, better) in METRICS.items():
            vals = [r['figures'][field] for r in runs
                    if r['case'] == case and r['mode'] == m and r['figures'].get(field) is not None]
            pm[name] = {'n': len(vals), 'values': vals,
                        'median': statistics.median(vals) if vals else None, 'best': better(vals) if vals else None}
        pm['goals'] = {}
        for gname, a, b, op, g in GOALS:
            rat = {}
            for key in ('median', 'best'):
                x, y = pm[a][key], pm[b][key]
                rat[key] = x / y if x and y else None
            ok = rat['best'] is not None and (rat['best'] <= g if op == '<=' else rat['best'] >= g)
            pm['goals'][gname] = {'median_ratio': rat['median'], 'best_ratio': rat['best'], 'goal': f"{op} {g}",
                                  'met': ok}
        # The stall floor of this state: its own noise runs and RPC rate if
        # it has them, else the whole run's.
        noise = [r['figures'].get('noise') for r in runs if r['case'] == 'noise' and r['mode'] == m]
        rates = [r['figures']['per_s'] for r in runs
                 if r['case'] == 'rpc_lat' and r['mode'] == m and r['figures'].get('per_s')]
        if noise and rates:
            src, nz, rt = 'this state', noise, rates
        else:
            src, nz, rt = 'whole run', all_noise, all_rates
        floor = stall_floor(nz, statistics.median(rt) if rt else None)
        pm['stall_floor_ns'] = floor
        pm['stall_floor_from'] = src
        for what in ('rpc_rtt_p99_9_ns', 'send_rtt_p99_9_ns'):
            p = pm[what]['median']
            pm[what.replace('_ns', '_in_floor_units')] = p / floor if p and floor else None
        per_mode[m] = pm
    # Mixed runs, by transition: their figures are in no state's, but show
    # what a case did that moved the machine (or was moved).
    mixed = {}
    for r in runs:
        if r['mode'] != 'mixed':
            continue
        for name, (case, field, unit, better) in METRICS.items():
            if r['case'] == case and r['figures'].get(field) is not None:
                mixed.setdefault(r['from_to'], {}).setdefault(name, []).append(r['figures'][field])
    return {'samples': samples, 'classes': classes, 'thresholds_ns': thresholds, 'runs': runs,
            'runs_per_mode': counts, 'per_mode': per_mode, 'mixed_figures': mixed}


def _fmt(v, unit):
    if v is None:
        return '-'
    return f"{v:.0f} ns" if unit == 'ns' else f"{v / 1e6:.2f} M/s"


def report(res, nrounds, out=sys.stdout):
    p = lambda *a, **k: print(*a, file=out, **k)
    samples, classes, th = res['samples'], res['classes'], res['thresholds_ns']
    p(f"{nrounds} rounds, cases interleaved, 32-byte messages, peer on CPU 1, client on CPU 0")
    p(f"cache-line round trips: {len(samples)} samples, {min(samples):.0f}-{max(samples):.0f} ns; "
      f"{len(classes)} machine state{'s' if len(classes) > 1 else ''} (least-variance split of log(ns), "
      f"neighbours' medians >= {MIN_RATIO}x apart)")
    desc = ''
    for i, c in enumerate(classes):
        desc += f"{c['name']} {c['lo']:.0f}-{c['hi']:.0f} ns (median {c['median']:.0f}, {c['n']} samples)"
        if i < len(th):
            desc += f" | {th[i]:.0f} ns | "
    p(f"  {desc}")
    cols = [c['name'] for c in classes] + ['mixed']
    p("\nruns per state (a run is in a state when the cache line before and after it was)")
    p(f"{'case':14}" + ''.join(f"{m:>7}" for m in cols))
    for c in CASES:
        if c in res['runs_per_mode']:
            p(f"{c:14}" + ''.join(f"{res['runs_per_mode'][c][m]:7d}" for m in cols))
    for m, pm in res['per_mode'].items():
        cl = pm['cacheline_rtt_ns']
        p(f"\n{m} state: cache line median {cl['median']:.0f} ns, best {cl['best']:.0f} ns ({cl['n']} samples)")
        p(f"  {'what':40} {'runs':>5} {'median':>11} {'best':>11}")
        for name, (case, field, unit, better) in METRICS.items():
            e = pm[name]
            p(f"  {name:40} {e['n']:5d} {_fmt(e['median'], unit):>11} {_fmt(e['best'], unit):>11}")
        p(f"  {'goal':40} {'median':>8} {'best':>8} {'goal':>8}")
        s = lambda v: f"{v:8.2f}" if v is not None else f"{'-':>8}"
        for gname, g in pm['goals'].items():
            p(f"  {gname:40} {s(g['median_ratio'])} {s(g['best_ratio'])} {g['goal']:>8}  "
              f"{'met' if g['met'] else 'short'} (best vs best)")
        fl = pm['stall_floor_ns']
        if fl is None:
            p("  stall floor: no tern-noise figures")
        elif fl == 0:
            p("  stall floor: under 1 us (fewer than 0.1% of round trips meet a 1-us stall)")
        else:
            for what, label in (('rpc_rtt_p99_9', 'RPC'), ('send_rtt_p99_9', 'raw SEND')):
                v = pm[what + '_ns']['median']
                if v:
                    p(f"  {label} p99.9 {v / 1e3:.1f} us = {pm[what + '_in_floor_units']:.2f}x the stall floor "
                      f"({fl / 1e3:.0f} us; tern-noise, {pm['stall_floor_from']})")
    if res['mixed_figures']:
        p("\nruns that straddled a change of state (in no state's figures), medians by change:")
        for ft, figs in sorted(res['mixed_figures'].items()):
            parts = []
            for name, vals in figs.items():
                unit = METRICS[name][2]
                parts.append(f"{name} {_fmt(statistics.median(vals), unit)} ({len(vals)})")
            p(f"  {ft}: " + ', '.join(parts))


def self_test(paths):
    """Checks on recorded runs; exits non-zero on the first failure."""
    fails = []

    def check(ok, what):
        if not ok:
            fails.append(what)

    # Recorded cache-line medians (ns) of three runs of this VM.
    three = [49, 49, 49, 49] + list(range(106, 126)) + [475, 479, 483, 483, 484, 484, 485, 486, 487, 490]
    cls, th = classes_of(three)
    check([c['name'] for c in cls] == ['short', 'fast', 'slow'], f"three states: got {[c['name'] for c in cls]}")
    check(len(th) == 2 and 49 < th[0] < 106 and 125 < th[1] < 475, f"three states: thresholds {th}")
    check([c['n'] for c in cls] == [4, 20, 10], f"three states: sizes {[c['n'] for c in cls]}")
    one = [103, 104, 105, 106, 107, 110, 111, 112, 114, 117, 119, 121]
    cls, th = classes_of(one)
    check([c['name'] for c in cls] == ['fast'] and th == [], f"one state: got {[c['name'] for c in cls]} {th}")
    two = [108, 109, 112, 113, 114, 114, 120, 458, 462, 466, 473, 475, 477, 479, 480, 482, 483]
    cls, th = classes_of(two)
    check([c['name'] for c in cls] == ['fast', 'slow'], f"two states: got {[c['name'] for c in cls]}")
    # A single 49-ns reading among fast ones is a state of its own.
    cls, th = classes_of([49] + one)
    check([c['name'] for c in cls] == ['short', 'fast'], f"one short sample: got {[c['name'] for c in cls]}")
    # A case between a fast and a short reading is mixed, in no state's figures.
    data = {'rounds': [{'cl': [110, 112, 49, 111], 'order': ['rpc_lat', 'uct_am_lat', 'send_lat'],
                        'figures': {'rpc_lat': {'p50_ns': 600, 'p99_9_ns': 5000, 'per_s': 1.3e6},
                                    'uct_am_lat': {'rtt_ns': 90}, 'send_lat': {'p50_ns': 280, 'p99_9_ns': 4000}}}],
            'noise': None}
    res = analyze(data)
    modes = [(r['case'], r['mode']) for r in res['runs']]
    check(modes == [('rpc_lat', 'fast'), ('uct_am_lat', 'mixed'), ('send_lat', 'mixed')], f"mixed runs: {modes}")
    check(res['per_mode']['fast']['uct_am_lat_rtt_ns']['n'] == 0, "a mixed uct run counted in the fast state")
    # The stall floor: at 1 M round trips/s, 0.1% is 1,000 stalls/s. Both
    # CPUs together meet >= 2 us 1,200 times a second and >= 5 us 600: 2 us.
    noise = {'bounds_ns': [1000, 2000, 5000, 10000],
             'cpus': [{'gaps_per_s': [500, 400, 200, 100]}, {'gaps_per_s': [500, 400, 200, 100]}]}
    check(stall_floor([noise], 1e6) == 2000, f"stall floor {stall_floor([noise], 1e6)}, want 2000")
    check(stall_floor([noise], 2e6) == 1000, f"stall floor at 2 M/s {stall_floor([noise], 2e6)}, want 1000")
    check(stall_floor([noise], 1e8) == 0, f"stall floor at 100 M/s {stall_floor([noise], 1e8)}, want 0")
    data['rounds'][0]['order'].append('noise')
    data['rounds'][0]['cl'].append(112)
    data['rounds'][0]['figures']['noise'] = {'noise': noise}
    pm = analyze(data)['per_mode']['fast']
    check(pm['stall_floor_ns'] == 2000 and pm['stall_floor_from'] == 'this state' and
          pm['rpc_rtt_p99_9_in_floor_units'] == 2.5,
          f"fast state's floor {pm['stall_floor_ns']} ({pm['stall_floor_from']}), p99.9 in floor units "
          f"{pm['rpc_rtt_p99_9_in_floor_units']}, want 2000 (this state), 2.5")
    # Recorded whole runs: every state the samples show gets figures of its own,
    # and no state's figures include a run from another.
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        want = data.get('expect', {})
        res = analyze(data)
        got = [c['name'] for c in res['classes']]
        if 'states' in want:
            check(got == want['states'], f"{path}: states {got}, want {want['states']}")
        for r in res['runs']:
            if r['mode'] == 'mixed':
                continue
            c = next(c for c in res['classes'] if c['name'] == r['mode'])
            ok = all(c['lo'] <= v <= c['hi'] for v in (r['cl_before_ns'], r['cl_after_ns']))
            check(ok, f"{path}: round {r['round']} {r['case']} filed under {r['mode']} with cache line "
                      f"{r['cl_before_ns']}/{r['cl_after_ns']}")
        for m, n in want.get('runs_per_state', {}).items():
            tot = sum(v.get(m, 0) for v in res['runs_per_mode'].values())
            check(tot == n, f"{path}: {tot} runs in {m}, want {n}")
        for key, v in want.get('fast_uct_am_lat_rtt_ns', {}).items():
            e = res['per_mode'].get('fast', {}).get('uct_am_lat_rtt_ns', {})
            check(e.get(key) == v, f"{path}: fast uct am_lat {key} {e.get(key)}, want {v}")
        import io
        buf = io.StringIO()
        report(res, len(data['rounds']), buf)
        for m in got:
            check(f"\n{m} state:" in buf.getvalue() or res['per_mode'][m]['cacheline_rtt_ns']['n'] == 0,
                  f"{path}: no section for state {m} in the report")
    for f_ in fails:
        print(f"ucx_modes self-test: FAIL: {f_}", file=sys.stderr)
    print(f"ucx_modes self-test: {'FAIL' if fails else 'ok'} ({len(fails)} failures, {len(paths)} recorded runs)")
    return 1 if fails else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == '--self-test':
        return self_test(argv[2:])
    if len(argv) == 3 and argv[1] == '--pack':
        json.dump(pack(argv[2]), sys.stdout, indent=None, separators=(',', ':'))
        print()
        return 0
    if len(argv) < 2 or argv[1].startswith('-'):
        print(__doc__ or 'usage: ucx_modes.py RAWDIR [--json FILE] | --pack RAWDIR | --self-test FIXTURE...',
              file=sys.stderr)
        return 2
    raw = argv[1]
    json_out = argv[3] if len(argv) >= 4 and argv[2] == '--json' else ''
    data = pack(raw)
    res = analyze(data)
    report(res, len(data['rounds']))
    if json_out:
        with open(json_out, 'w') as f:
            json.dump({'rounds': len(data['rounds']), **{k: v for k, v in res.items()}}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
