#!/usr/bin/env python3
# Per-side counts from callgrind runs of tern-rpc-cost with --toggle-collect
# on one side's functions (scripts/measure-cost.sh --sides): reads the
# difference between a short and a long run's files and prints, per RPC,
# instructions, conditional branches and their mispredictions (callgrind's
# branch simulator), data reads and writes, split into the engine's own,
# pmd/shm's and libc's, and the functions that cost most.
#   cost_sides.py SHORT.cg LONG.cg CALLS [TOP]
import re
import sys


def load(path):
    """Exclusive cost per function name: {name: [events...]}, and the event names."""
    names, cost, events, cur = {}, {}, [], None
    in_call = False
    for line in open(path):
        if line.startswith('events:'):
            events = line.split()[1:]
            continue
        m = re.match(r'(c?fn)=\((\d+)\)(?: (.*))?', line)
        if m:
            kind, i, n = m.groups()
            if n:
                names[i] = n.strip()
            if kind == 'fn':
                cur = i
            continue
        if line.startswith('calls='):
            in_call = True  # the next cost line is the call's inclusive cost: not this function's own
            continue
        if cur is None or not line[:1].isdigit() and line[:1] not in '+-*':
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        if in_call:
            in_call = False
            continue
        vals = [int(x) for x in parts[1:]]
        acc = cost.setdefault(cur, [0] * len(events))
        for k, v in enumerate(vals):
            acc[k] += v
    return {names.get(i, i): v for i, v in cost.items()}, events


def part(name):
    if name.startswith('tern::shm::'):
        return 'pmd/shm'
    if name.startswith('tern::') or name.startswith('(anonymous namespace)::'):
        return 'engine'
    return 'libc/other'


def main():
    short, events = load(sys.argv[1])
    long_, _ = load(sys.argv[2])
    n = float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    idx = {e: k for k, e in enumerate(events)}
    per = {}
    for f in set(short) | set(long_):
        a, b = short.get(f, [0] * len(events)), long_.get(f, [0] * len(events))
        per[f] = [(y - x) / n for x, y in zip(a, b)]
    cols = [c for c in ('Ir', 'Bc', 'Bcm', 'Dr', 'Dw') if c in idx]
    label = {'Ir': 'instr', 'Bc': 'branches', 'Bcm': 'mispred', 'Dr': 'loads', 'Dw': 'stores'}
    print(f"  {'part':14}" + ''.join(f"{label[c]:>10}" for c in cols))
    tot = [0.0] * len(events)
    for p in ('engine', 'pmd/shm', 'libc/other'):
        s = [0.0] * len(events)
        for f, v in per.items():
            if part(f) == p:
                s = [x + y for x, y in zip(s, v)]
        tot = [x + y for x, y in zip(tot, s)]
        print(f"  {p:14}" + ''.join(f"{s[idx[c]]:10.1f}" for c in cols))
    print(f"  {'total':14}" + ''.join(f"{tot[idx[c]]:10.1f}" for c in cols))
    print(f"  top functions (instructions per RPC, own; {', '.join(label[c] for c in cols[1:])}):")
    for f, v in sorted(per.items(), key=lambda kv: -kv[1][idx['Ir']])[:top]:
        if v[idx['Ir']] < 1:
            break
        short_name = re.match(r'((?:\(anonymous namespace\)::)?[^(]*)', f).group(1)
        print(f"    {v[idx['Ir']]:7.1f}  {short_name[:60]:60}" + ''.join(f"{v[idx[c]]:7.1f}" for c in cols[1:]))


main()
