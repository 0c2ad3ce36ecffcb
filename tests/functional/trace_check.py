#!/usr/bin/env python3
"""Loads a Tern call trace (Chrome trace-event JSON, Engine::write_trace) with
Python's json module and checks that every sampled call has its stages, in
order, with non-negative durations, inside the call's own span.

  trace_check.py TRACE SIDE CALLS [PULLED]

SIDE is client or server; CALLS the number of sampled calls the file must
hold; PULLED (server) how many of them must have a pull stage."""
import json
import sys

STAGES = {"client": ["queue", "wire", "invalidate", "complete"], "server": ["pull", "wait", "handler", "post"]}
EPS = 0.002  # us: ts and dur are printed with 3 decimals each


def fail(msg):
    print("trace_check: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    doc = json.load(open(sys.argv[1]))
    side, want = sys.argv[2], int(sys.argv[3])
    want_pulled = int(sys.argv[4]) if len(sys.argv) > 4 else None
    calls = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M":
            continue
        if e["ph"] != "X" or e["cat"] != side:
            fail("unexpected event %r" % e)
        calls.setdefault(e["args"]["call"], []).append(e)
    if len(calls) != want:
        fail("%d sampled calls, want %d" % (len(calls), want))
    pulled = 0
    for n, evs in calls.items():
        span = [e for e in evs if e["name"] == "call"]
        stages = [e for e in evs if e["name"] != "call"]
        if len(span) != 1:
            fail("call %s: %d call events" % (n, len(span)))
        span = span[0]
        names = [e["name"] for e in stages]
        expect = STAGES[side] if "pull" in names or side == "client" else STAGES[side][1:]
        if names != expect:
            fail("call %s: stages %s, want %s" % (n, names, expect))
        pulled += "pull" in names
        t = span["ts"]
        for e in stages:
            if e["dur"] < 0:
                fail("call %s: %s lasts %s us" % (n, e["name"], e["dur"]))
            if e["ts"] + EPS < t:
                fail("call %s: %s starts at %s, before the previous stage ended (%s)" % (n, e["name"], e["ts"], t))
            if e["args"]["xid"] != span["args"]["xid"] or e["tid"] != span["tid"]:
                fail("call %s: %s is not on the call's connection or xid" % (n, e["name"]))
            t = e["ts"] + e["dur"]
        if abs(t - (span["ts"] + span["dur"])) > 2 * EPS * len(stages):
            fail("call %s: stages end at %s, the call at %s" % (n, t, span["ts"] + span["dur"]))
    if want_pulled is not None and pulled != want_pulled:
        fail("%d calls with a pull stage, want %d" % (pulled, want_pulled))
    print("trace_check: %d %s calls, stages in order" % (len(calls), side))


main()
