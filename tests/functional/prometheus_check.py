#!/usr/bin/env python3
"""Parses a Tern /metrics exposition with the Prometheus client's own parser
and checks it against the engines' stats_json documents taken at rest.

  prometheus_check.py EXPOSITION STATS_JSON [--folded]

STATS_JSON is {"<engine telemetry id>": <Engine::stats_json()>, ...}. With
--folded the exposition was rendered with max_conns=0 and max_procs=1: every
connection is in conn="other" and all but the first procedure in
proc="other". Exits non-zero, saying why, on the first mismatch."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

GAUGES = {"connections", "rkeys_live", "bulk_pool_in_use", "bulk_pool_high_water", "waiting_for_memory"}
# conn_counters_view() (engine_stats.cc): what the conn telemetry source
# shows; stats_json's connections also carry the driver's QP counters.
CONN = {"calls", "replies", "sends", "recvs", "bytes_sent", "bytes_received", "read_chunks", "write_chunks",
        "reply_chunks", "read_chunk_bytes", "write_chunk_bytes", "reply_chunk_bytes", "nomsg", "errors", "bad_xids",
        "bad_replies", "local_inv_chains", "remote_invalidations", "credit_waits", "backlog_depth", "ring_full",
        "retransmits", "timeouts"}
PROGS = {100003: "nfs", 100005: "mount", 100000: "portmapper", 100021: "nlockmgr", 100024: "status",
         100227: "nfs_acl", 4294967295: "unserved"}


def fail(msg):
    print("prometheus_check: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    text = open(sys.argv[1]).read()
    stats = json.load(open(sys.argv[2]))
    folded = "--folded" in sys.argv[3:]
    samples = {}  # (name, frozenset(labels)) -> value
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            if key in samples:
                fail("duplicate sample %s %s" % (s.name, dict(s.labels)))
            samples[key] = s.value
    if not samples:
        fail("no samples")

    def get(name, **labels):
        key = (name, frozenset(labels.items()))
        if key not in samples:
            fail("missing %s%s" % (name, labels))
        return samples[key]

    def check_hist(name, labels, count, mean):
        buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in samples.items()
                          if k[0] == name + "_bucket" and {x for x in k[1] if x[0] != "le"} == set(labels.items())))
        if not buckets or buckets[-1][0] != float("inf"):
            fail("%s%s: no +Inf bucket" % (name, labels))
        last = 0
        for le, v in buckets:
            if v < last:
                fail("%s%s: bucket le=%s goes down" % (name, labels, le))
            last = v
        if buckets[-1][1] != count or get(name + "_count", **labels) != count:
            fail("%s%s: count %s / +Inf %s, stats_json says %s" % (name, labels, get(name + "_count", **labels),
                                                                  buckets[-1][1], count))
        if count:
            got = get(name + "_sum", **labels) * 1e9 / count
            if abs(got - mean) > 1.0:
                fail("%s%s: mean %.1f ns, stats_json says %s" % (name, labels, got, mean))

    checked = 0
    for eid, doc in stats.items():
        for k, v in doc["engine"].items():
            if k.startswith("reg_cache_"):
                continue  # stats_view() only: the telemetry provider shows the fixed counters
            name = fam = "tern_engine_" + k
            want_type = "gauge" if k in GAUGES else "counter"
            if types.get(fam) != want_type:
                fail("%s: type %s, want %s" % (fam, types.get(fam), want_type))
            sname = name if k in GAUGES else name + "_total"
            if get(sname, engine=eid) != v:
                fail("%s{engine=%s} = %s, stats_json says %s" % (sname, eid, get(sname, engine=eid), v))
            checked += 1
        other = {}
        for c in doc["connections"]:
            side = c["side"]
            if folded:
                o = other.setdefault(side, {"counters": {}, "count": 0, "sum": 0})
                for k, v in c["counters"].items():
                    o["counters"][k] = o["counters"].get(k, 0) + v
                continue
            labels = dict(engine=eid, conn=str(c["id"]), side=side, peer=c["peer"])
            for k, v in c["counters"].items():
                if k not in CONN:
                    continue  # the driver's QP counters: in stats_json only
                if get("tern_conn_%s_total" % k, **labels) != v:
                    fail("tern_conn_%s_total%s = %s, stats_json says %s" %
                         (k, labels, get("tern_conn_%s_total" % k, **labels), v))
                checked += 1
            check_hist("tern_conn_rtt_seconds", labels, c["rtt_ns"]["count"], c["rtt_ns"]["mean"])
        for side, o in other.items():
            labels = dict(engine=eid, conn="other", side=side, peer="other")
            for k, v in o["counters"].items():
                if k not in CONN:
                    continue
                if get("tern_conn_%s_total" % k, **labels) != v:
                    fail("folded tern_conn_%s_total%s = %s, want the sum %s" %
                         (k, labels, get("tern_conn_%s_total" % k, **labels), v))
                checked += 1
        if folded and get("tern_exporter_series_folded", engine=eid, kind="conn") != len(doc["connections"]):
            fail("engine %s: folded conns %s, want %s" % (eid, get("tern_exporter_series_folded", engine=eid,
                                                                   kind="conn"), len(doc["connections"])))
        procs = doc["procedures"]
        for i, p in enumerate(procs):
            if folded and i >= 1:
                continue
            labels = dict(engine=eid, side=p["side"], prog=PROGS.get(p["prog"], str(p["prog"])),
                          vers=str(p["vers"]), proc=str(p["proc"]))
            for k in ("ops", "errors", "bytes_sent", "bytes_received"):
                if get("tern_proc_%s_total" % k, **labels) != p[k]:
                    fail("tern_proc_%s_total%s = %s, stats_json says %s" %
                         (k, labels, get("tern_proc_%s_total" % k, **labels), p[k]))
                checked += 1
            check_hist("tern_proc_rtt_seconds", labels, p["rtt_ns"]["count"], p["rtt_ns"]["mean"])
        if folded and len(procs) > 1:
            by_side = {}
            for p in procs[1:]:
                by_side[p["side"]] = by_side.get(p["side"], 0) + p["ops"]
            for side, ops in by_side.items():
                labels = dict(engine=eid, side=side, prog="other", vers="other", proc="other")
                if get("tern_proc_ops_total", **labels) != ops:
                    fail("folded tern_proc_ops_total%s = %s, want %s" % (labels, get("tern_proc_ops_total", **labels),
                                                                         ops))
                checked += 1
    print("prometheus_check: %d samples parsed, %d values checked" % (len(samples), checked))


main()
