# Per-procedure deltas from two copies of /proc/self/mountstats, for the
# measure-nfs-*.sh scripts: {op: (calls, queue_ms, rtt_ms, execute_ms)} for
# the mount on MOUNTPOINT (queue: from the call's start to its transmission,
# which includes waiting for a transport credit), and its "xprt: rdma"
# counters' difference.
import re


def _section(text, mountpoint):
    ops, xprt, on = {}, [], False
    for line in text.splitlines():
        if line.startswith("device "):
            on = f" mounted on {mountpoint} " in line
            continue
        if not on:
            continue
        s = line.strip()
        if s.startswith("xprt:") and " rdma " in f" {s} ":
            xprt = [int(x) for x in s.split()[2:] if x.lstrip("-").isdigit()]
            continue
        m = re.match(r"^([A-Z_]+):\s+(\d+(?:\s+\d+){7,})$", s)
        if m:
            f = [int(x) for x in m.group(2).split()]
            ops[m.group(1)] = (f[0], f[5], f[6], f[7])
    return ops, xprt


def delta(before, after, mountpoint):
    b, bx = _section(before, mountpoint)
    a, ax = _section(after, mountpoint)
    ops = {}
    for op, now in a.items():
        was = b.get(op, (0, 0, 0, 0))
        if now[0] - was[0] > 0:
            ops[op] = tuple(x - y for x, y in zip(now, was))
    xprt = [x - y for x, y in zip(ax, bx)] if bx and ax else ax
    return ops, xprt
