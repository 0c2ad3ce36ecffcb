#!/usr/bin/env python3
# Per-side counts from callgrind runs of tern-rpc-cost with --toggle-collect
# on one side's functions (scripts/measure-cost.sh --sides): reads the
# difference between a short and a long run's files and prints, per RPC,
# instructions, conditional branches and their mispredictions (callgrind's
# branch simulator), data reads and writes, split into the engine's own,
# pmd/shm's and libc's, and the functions that cost most; with the cache
# simulator's events, data cache misses too (D1 miss: reads and writes).
# With BINARY (runs made with --dump-instr=yes), also the instructions that
# cost many cycles for one count, from the binary's own code (objdump):
# clock reads (rdtsc), divisions, atomic read-modify-writes (lock prefix,
# xchg) and fences, per RPC.
#   cost_sides.py SHORT.cg LONG.cg CALLS [TOP [BINARY]]
import re
import subprocess
import sys


def load(path):
    """Exclusive cost per function name: {name: [events...]}, and the event names."""
    names, cost, events, cur = {}, {}, [], None
    in_call = False
    npos = 1  # position columns before the costs: 'line', or 'instr line'
    for line in open(path):
        if line.startswith('events:'):
            events = line.split()[1:]
            continue
        if line.startswith('positions:'):
            npos = len(line.split()) - 1
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
        if len(parts) < 1 + npos:
            continue
        if in_call:
            in_call = False
            continue
        vals = [int(x) for x in parts[npos:]]
        acc = cost.setdefault(cur, [0] * len(events))
        for k, v in enumerate(vals):
            acc[k] += v
    return {names.get(i, i): v for i, v in cost.items()}, events


def costly_addresses(binary):
    """{address: kind} of the binary's instructions that cost many cycles each."""
    kinds = {}
    dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', binary], capture_output=True, text=True).stdout
    for line in dis.splitlines():
        m = re.match(r'\s*([0-9a-f]+):\s+(\S+)(?:\s+(\S+))?', line)
        if not m:
            continue
        addr, op, arg = int(m.group(1), 16), m.group(2), m.group(3) or ''
        if op == 'rdtsc' or op == 'rdtscp':
            kinds[addr] = 'clock reads'
        elif op.startswith('div') and not op.startswith('divs') or op.startswith('idiv'):
            kinds[addr] = 'divisions'
        elif op == 'lock' or (op.startswith('xchg') and '(' in arg):
            kinds[addr] = 'atomic RMWs'
        elif op in ('mfence', 'sfence', 'lfence'):
            kinds[addr] = 'fences'
    return kinds


def count_at(path, binary, kinds):
    """Executions of the given addresses of `binary`'s code in one --dump-instr=yes file."""
    out = {k: 0 for k in set(kinds.values())}
    obs, cur_ob, addr, skip = {}, None, 0, False
    for line in open(path):
        m = re.match(r'(c?ob)=\((\d+)\)(?: (.*))?', line)
        if m:
            kind, i, n = m.groups()
            if n:
                obs[i] = n.strip()
            if kind == 'ob':
                cur_ob = obs.get(i)
            continue
        if line.startswith('calls='):
            skip = True
            continue
        c = line[:1]
        if not (c == '0' or c in '+-*'):
            continue
        parts = line.split()
        a = parts[0]
        if a.startswith('0x'):
            addr = int(a, 16)
        elif a[0] in '+-':
            addr += int(a)
        if skip:
            skip = False
            continue
        if cur_ob == binary and addr in kinds and len(parts) > 2:
            out[kinds[addr]] += int(parts[2])
    return out


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
    binary = sys.argv[5] if len(sys.argv) > 5 else None
    idx = {e: k for k, e in enumerate(events)}
    per = {}
    for f in set(short) | set(long_):
        a, b = short.get(f, [0] * len(events)), long_.get(f, [0] * len(events))
        per[f] = [(y - x) / n for x, y in zip(a, b)]
    if 'D1mr' in idx and 'D1mw' in idx:
        # Data cache misses, reads and writes together: with measure-cost's
        # small D1 (64 lines, fully associative) a proxy for the cache lines
        # each part touches per RPC (a line touched again after 64 others
        # counts again).
        events = events + ['D1m']
        idx['D1m'] = len(events) - 1
        for f, v in per.items():
            v.append(v[idx['D1mr']] + v[idx['D1mw']])
    cols = [c for c in ('Ir', 'Bc', 'Bcm', 'Dr', 'Dw', 'D1m') if c in idx]
    label = {'Ir': 'instr', 'Bc': 'branches', 'Bcm': 'mispred', 'Dr': 'loads', 'Dw': 'stores', 'D1m': 'D1 miss'}
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
    if binary:
        import os
        kinds = costly_addresses(binary)
        a = count_at(sys.argv[1], os.path.realpath(binary), kinds)
        b = count_at(sys.argv[2], os.path.realpath(binary), kinds)
        print('  per RPC, of many cycles each: ' +
              ', '.join(f"{(b[k] - a[k]) / n:.2f} {k}" for k in ('clock reads', 'divisions', 'atomic RMWs', 'fences')
                        if k in a))
    print(f"  top functions (instructions per RPC, own; {', '.join(label[c] for c in cols[1:])}):")
    for f, v in sorted(per.items(), key=lambda kv: -kv[1][idx['Ir']])[:top]:
        if v[idx['Ir']] < 1:
            break
        short_name = re.match(r'((?:\(anonymous namespace\)::)?[^(]*)', f).group(1)
        print(f"    {v[idx['Ir']]:7.1f}  {short_name[:60]:60}" + ''.join(f"{v[idx[c]]:7.1f}" for c in cols[1:]))


main()
