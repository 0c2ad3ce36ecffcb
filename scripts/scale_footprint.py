#!/usr/bin/env python3
"""Per-call cost of the tern-scale server at two connection counts, from
callgrind runs of two lengths each (scripts/measure-scale.sh --footprint).

  scale_footprint.py DIR N1 N2
DIR holds cg.<N>.<short|long>.<pid> (every process of each run) and
calls.<N>.<short|long> (the run's call count). The server's file is the one
with ServerConn::on_message; per call = (long - short) / (calls long - calls
short), so the set-up, the teardown and the warm-up cancel out. Printed per
function (inclusive): instructions, D1 read and write misses, LL misses.
Time-driven work (run_timers, the safety net, the idle sweep) is inflated
under valgrind, which runs the program ~50x slower: read it as an upper bound.
"""
import glob
import re
import subprocess
import sys

FUNCS = [
    "PROGRAM TOTALS", "tern::rpc::EngineImpl::poll()", "tern::shm::ShmCq::poll(",
    "tern::shm::ShmDevice::visit_ready()", "tern::shm::ShmQp::execute_inbound()",
    "tern::shm::ShmQp::complete_sends()", "tern::shm::ShmCq::safety_net()",
    "tern::rpc::ServerConn::on_message(", "tern::rpc::ServerConn::reply(",
    "tern::rpc::ConnBase::post(", "tern::shm::ShmQp::post_inline_send(",
    "tern::rpc::EngineImpl::dispatch_send(", "tern::rpc::RecvQueue::post(",
    "tern::rpc::EngineImpl::run_timers()",
]


def load(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--show=Ir,D1mr,D1mw,DLmr,DLmw",
                          "--threshold=100", path], capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in out.splitlines():
        m = re.match(r"\s*((?:[\d,]+(?: \([^)]*\))?|\.)(?:\s+(?:[\d,]+(?: \([^)]*\))?|\.))*)\s+(.*)$", line)
        if not m or not m.group(1).strip():
            continue
        vals = [0 if t == "." else int(t.replace(",", ""))
                for t in re.findall(r"[\d,]+(?= \()|(?<!\()\.(?!\d)", m.group(1))]
        name = m.group(2)
        if "PROGRAM TOTALS" in name:
            name = "PROGRAM TOTALS"
        else:
            name = re.sub(r"^[^\s:]*:", "", name)  # the file part ("???:")
        costs.setdefault(name, (vals + [0] * 5)[:5])
    return costs


def server(d, n, kind):
    for f in sorted(glob.glob(f"{d}/cg.{n}.{kind}.*")):
        c = load(f)
        if any("ServerConn::on_message" in k for k in c):
            return c
    sys.exit(f"no server profile for {n} {kind} in {d}")


def per_call(d, n):
    calls = [int(open(f"{d}/calls.{n}.{k}").read()) for k in ("short", "long")]
    a, b = server(d, n, "short"), server(d, n, "long")
    dc = calls[1] - calls[0]
    return {k: [(b[k][i] - a.get(k, [0] * 5)[i]) / dc for i in range(5)] for k in b}


def main():
    d, n1, n2 = sys.argv[1], sys.argv[2], sys.argv[3]
    x, y = per_call(d, n1), per_call(d, n2)
    print(f"{'server, per call':42} | {n1 + ' conns: Ir':>13} {'D1mr':>6} {'D1mw':>6} {'LLm':>5} |"
          f" {n2 + ' conns: Ir':>14} {'D1mr':>6} {'D1mw':>6} {'LLm':>5}")
    for f in FUNCS:
        k = next((k for k in y if k.startswith(f) and "'" not in k), None)
        if k is None:
            continue
        a, b = x.get(k, [0] * 5), y[k]
        print(f"{f[-42:]:42} | {a[0]:13.0f} {a[1]:6.1f} {a[2]:6.1f} {a[3] + a[4]:5.1f} |"
              f" {b[0]:14.0f} {b[1]:6.1f} {b[2]:6.1f} {b[3] + b[4]:5.1f}")


if __name__ == "__main__":
    main()
