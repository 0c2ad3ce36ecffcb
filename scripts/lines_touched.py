#!/usr/bin/env python3
# Cache lines each side of an inline 32-byte RPC at depth 1 touches, and
# its stores to shared memory, from a valgrind lackey trace of every load
# and store of bench/tern-rpc-cost (both engines on one thread; no
# performance counters needed, and like callgrind's counts the figures do
# not move with the machine's load).
#
#   lines_touched.py [BINARY] [CALLS [QD]]  (default build-perf/bench/tern-rpc-cost, 300, 1)
#
# The program (TERN_RPC_COST_MAP=1) prints where its side functions are and
# its shared mappings; an instruction inside client_call()/client_poll()
# starts the client's share, one inside server_poll() the server's, one in
# main() ends either. An RPC is the stretch from one client_call() to the
# next. Per RPC and side it prints the distinct 64-byte lines touched, split
# into private memory and shared memory (the MAP_SHARED mappings: pmd/shm's
# rings, links and the engines' registered arenas, which the peer process
# reads), the loads and stores, the stores to shared memory, and the shared
# lines this side writes that the other side touches in the same RPC: the
# lines that cross between the cores once per RPC when the two engines run
# on two (the same line mapped at two addresses is one line: it is keyed by
# the file and its offset). The first 1000 calls are tern-rpc-cost's
# warm-up; the averages are over the RPCs after it. With QD > 1 the calls
# go out up to QD at a time and each side's poll handles what came in since
# its last: a record is then one such round (the calls made, the client's
# poll, the server's), and the figures are per RPC over the round (a line
# the round touches once counts 1/n for each of its n calls).
import os
import subprocess
import sys


def main(argv):
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = argv[1] if len(argv) > 1 else os.path.join(top, 'build-perf/bench/tern-rpc-cost')
    calls = int(argv[2]) if len(argv) > 2 else 300
    qd = int(argv[3]) if len(argv) > 3 else 1
    syms = {}
    for line in subprocess.run(['nm', '-S', '-C', binary], capture_output=True, text=True).stdout.splitlines():
        p = line.split(None, 3)
        if len(p) == 4:
            for fn in ('client_call(', 'client_poll(', 'server_poll('):
                if fn in p[3]:
                    syms[fn[:-1]] = (int(p[0], 16), int(p[1], 16))
            if p[3] == 'main':
                syms['main'] = (int(p[0], 16), int(p[1], 16))
    env = dict(os.environ, TERN_RPC_COST_MAP='1')
    proc = subprocess.Popen(['valgrind', '--tool=lackey', '--trace-mem=yes', binary, str(calls), '0', 'w', str(qd)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True, bufsize=1 << 20)
    shared = []  # (start, end, file key, offset)
    regions = []  # (start, end, label) of the private mappings, for the breakdown
    ranges = None  # [(lo, hi, side)]: side 'c', 's' or None (main)
    side = None
    rpcs = []  # per RPC: {side: stats}
    cur = None

    def new_rpc():
        r = {s: {'lines': set(), 'shm_lines': set(), 'shm_written': set(), 'loads': 0, 'stores': 0,
                 'shm_stores': 0, 'shm_stores_by': {}} for s in 'cs'}
        r['calls'] = 0
        r['served'] = False  # the server's poll ran since the round began
        return r

    def shm_key(a):
        for lo, hi, key, off in shared:
            if lo <= a < hi:
                return (key, (off + a - lo) >> 6)
        return None

    for line in proc.stderr:
        if ranges is None:
            if line.startswith('tern-rpc-cost-map fn '):
                p = line.split()
                rt = {p[i]: int(p[i + 1], 16) for i in range(2, len(p), 2)}
                base = rt['client_call'] - syms['client_call'][0]
                fns = {'client_call': 'c', 'client_poll': 'c', 'server_poll': 's', 'main': None}
                ranges = [(syms[f][0] + base, syms[f][0] + base + syms[f][1], sd) for f, sd in fns.items()]
            continue
        if line.startswith('tern-rpc-cost-map maps '):
            p = line.split()
            lo, hi = (int(x, 16) for x in p[2].split('-'))
            if len(p) >= 8 and p[3][3] == 's':
                name = p[7].replace('/memfd:', '') if len(p) >= 8 else '?'
                shared.append((lo, hi, (name, p[5], p[6]), int(p[4], 16)))
            else:
                name = p[7] if len(p) >= 8 else ''
                label = ('stack' if name == '[stack]' else 'program' if name == os.path.realpath(binary)
                         else 'heap' if name == '[heap]' else 'libraries' if name.startswith('/') else 'anonymous')
                regions.append((lo, hi, label))
            continue
        c0 = line[0]
        if c0 == 'I':
            a = int(line[3:line.index(',')], 16)
            for i, (lo, hi, sd) in enumerate(ranges):
                if lo <= a < hi:
                    if i == 0 and side != 'c':  # entering client_call(): the next RPC
                        if cur is None or cur['served']:  # ... and a new round
                            cur = new_rpc()
                            rpcs.append(cur)
                        cur['calls'] += 1
                    if sd == 's' and cur is not None:
                        cur['served'] = True
                    side = sd
                    break
            continue
        if side is None or cur is None or c0 != ' ':
            continue
        kind = line[1]
        if kind not in 'LSM':
            continue
        comma = line.index(',')
        a = int(line[3:comma], 16)
        n = int(line[comma + 1:])
        st = cur[side]
        if kind == 'L':
            st['loads'] += 1
        else:
            st['stores'] += 1
        for ln in range(a >> 6, ((a + n - 1) >> 6) + 1):
            k = shm_key(ln << 6)
            if k is None:
                st['lines'].add(ln)
                continue
            st['shm_lines'].add(k)
            if kind != 'L':
                st['shm_written'].add(k)
        if kind != 'L' and (k := shm_key(a)) is not None:
            st['shm_stores'] += 1
            st['shm_stores_by'][k[0][0]] = st['shm_stores_by'].get(k[0][0], 0) + 1
    proc.wait()
    # After the warm-up's 1000 calls; the last round may be cut short.
    first, made = 0, 0
    while first < len(rpcs) and made < 1000:
        made += rpcs[first]['calls']
        first += 1
    steady = rpcs[first:-1]
    ncalls = sum(r['calls'] for r in steady)
    if not steady or ncalls == 0:
        print(f"lines_touched.py: only {len(rpcs)} RPCs traced (valgrind failed?)", file=sys.stderr)
        return 1
    avg = lambda f: sum(f(r) for r in steady) / ncalls
    print(f"per RPC and side, inline 32-byte echo at depth {qd} (valgrind lackey, {ncalls} RPCs after the warm-up"
          f"{f', in {len(steady)} rounds' if len(steady) != ncalls else ''})")
    print(f"{'':52} {'client':>8} {'server':>8}")
    rows = [
        ('loads', lambda r, s: r[s]['loads']),
        ('stores', lambda r, s: r[s]['stores']),
        ('stores to shared memory', lambda r, s: r[s]['shm_stores']),
        ('cache lines touched, all', lambda r, s: len(r[s]['lines']) + len(r[s]['shm_lines'])),
        ('  of them private memory', lambda r, s: len(r[s]['lines'])),
        ('  of them shared memory', lambda r, s: len(r[s]['shm_lines'])),
        ('  shared lines written', lambda r, s: len(r[s]['shm_written'])),
        ('shared lines written here, touched by the other side',
         lambda r, s: len(r[s]['shm_written'] & r['s' if s == 'c' else 'c']['shm_lines'])),
    ]
    if qd > 1:
        # A reply the server writes in one round is read by the client's
        # poll of the next (the client polls first): lines the other side
        # touches in this round or the next.
        nxt = {id(r): rpcs[rpcs.index(r) + 1] for r in steady}
        rows.append(('  or in the next round',
                     lambda r, s: len(r[s]['shm_written'] & (r['s' if s == 'c' else 'c']['shm_lines'] |
                                                              nxt[id(r)]['s' if s == 'c' else 'c']['shm_lines']))))
    def region(ln):
        a = ln << 6
        for lo, hi, label in regions:
            if lo <= a < hi:
                return label
        return 'mapped after the set-up'
    names = sorted({n for r in steady for s in 'cs' for n in r[s]['shm_stores_by']})
    at = rows.index(next(x for x in rows if x[0] == 'stores to shared memory')) + 1
    for nm in names:
        rows.insert(at, (f"  into {nm}", lambda r, s, nm=nm: r[s]['shm_stores_by'].get(nm, 0)))
        at += 1
    labels = sorted({region(ln) for r in steady for s in 'cs' for ln in r[s]['lines']})
    at = rows.index(next(x for x in rows if x[0] == '  of them private memory')) + 1
    for lb in labels:
        rows.insert(at, (f"    {lb}", lambda r, s, lb=lb: sum(1 for ln in r[s]['lines'] if region(ln) == lb)))
        at += 1
    for name, f in rows:
        print(f"{name:52} {avg(lambda r: f(r, 'c')):8.1f} {avg(lambda r: f(r, 's')):8.1f}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
