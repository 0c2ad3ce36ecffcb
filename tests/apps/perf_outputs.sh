#!/usr/bin/env bash
# tern-perf for perftest users: short flags, a size sweep, stdev and the
# one-way column, the histogram, CSV and JSON on stdout, and --plot's PNG.
set -euo pipefail
perf=$(realpath "$1")
dir=$(mktemp -d /tmp/tern-perf-out-XXXXXX)
sock="$dir/perf.sock"
spid=
trap '[[ -n $spid ]] && kill $spid 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { python3 - "$@"; }
start_server() {  # start_server ARGS...
  rm -f "$sock" "$dir/server.log"  # the old log would say "listening" before the new server truncates it
  "$perf" server --dev "shm:path=$sock" "$@" 2>"$dir/server.log" &
  spid=$!
  for _ in $(seq 400); do grep -q "listening" "$dir/server.log" 2>/dev/null && return 0; sleep 0.05; done
  fail "server did not listen: $(cat "$dir/server.log")"
}
stop_server() { kill -TERM $spid; wait $spid || fail "server exited with $?"; spid=; }

start_server
# perftest's short flags: -s size, -n iterations, -q queue depth.
"$perf" client --dev "shm:path=$sock" -s 64 -n 400 -q 2 --warmup 20 --histogram --json "$dir/short.json" \
  >"$dir/short.txt" || fail "short flags"
py "$dir/short.json" <<'PY' || fail "short flags JSON: $(cat "$dir/short.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["size"] == 64 and r["requests"] == 400 and r["qd"] == 2, r
lat, one = r["latency_ns"], r["one_way_ns"]
assert lat["samples"] == 400 and lat["stdev"] >= 0, lat
assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["p99_9"] <= lat["max"], lat
assert abs(one["p50"] - lat["p50"] / 2) < 1 and abs(one["p99"] - lat["p99"] / 2) < 1, (one, lat)
h = r["histogram_ns"]
assert sum(n for _, _, n in h) == 400 and all(lo < hi for lo, hi, _ in h), h
assert "busy" in r and 0 <= r["cpu_share"] <= 1, r
PY
grep -q "one-way (rtt/2)" "$dir/short.txt" || fail "no one-way row: $(cat "$dir/short.txt")"
grep -q "stdev" "$dir/short.txt" || fail "no stdev column"
grep -q "histogram (round trip, ns)" "$dir/short.txt" || fail "no histogram: $(cat "$dir/short.txt")"

# -D: a duration.
"$perf" client --dev "shm:path=$sock" -D 0.5 --json "$dir/dur.json" --quiet >/dev/null || fail "-D"
py "$dir/dur.json" <<'PY' || fail "-D JSON: $(cat "$dir/dur.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] > 0 and 0.4 < r["seconds"] < 5, r
PY

# -a: a sweep, 8 B to 4 KiB over one connection, CSV on stdout (the table
# on stderr), JSON with a run per size.
"$perf" client --dev "shm:path=$sock" -a -s 4K -n 200 --warmup 10 --csv - --json "$dir/sweep.json" --quiet \
  >"$dir/sweep.csv" 2>"$dir/sweep.txt" || fail "-a: $(cat "$dir/sweep.txt")"
py "$dir/sweep.csv" "$dir/sweep.json" <<'PY' || fail "sweep: $(cat "$dir/sweep.csv")"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["size"]) for r in rows] == [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], rows
assert all(int(r["requests"]) == 200 and float(r["rtt_p50_ns"]) > 0 for r in rows), rows
j = json.load(open(sys.argv[2]))
assert [r["size"] for r in j["sweep"]] == [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096], j
PY
grep -q "rtt p99.9" "$dir/sweep.txt" || fail "no sweep table: $(cat "$dir/sweep.txt")"
# --json and --csv cannot both take stdout.
set +e
"$perf" client --dev "shm:path=$sock" --json - --csv - >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 2 ]] || fail "--json - --csv - exited $rc"

# --plot: a PNG of the latency distribution, drawn by gnuplot.
"$perf" client --dev "shm:path=$sock" -n 2000 --warmup 20 --plot "$dir/lat.png" --quiet >/dev/null || fail "--plot"
[[ -s "$dir/lat.png" ]] || fail "--plot made no file"
[[ $(head -c 8 "$dir/lat.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "--plot: not a PNG"
# Without gnuplot: a clear message before the run, exit 2.
set +e
msg=$(PATH=/nonexistent "$perf" client --dev "shm:path=$sock" -n 10 --plot "$dir/no.png" 2>&1)
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "needs gnuplot" <<<"$msg" || fail "--plot without gnuplot: $rc $msg"
stop_server

# The RPC transport: a sweep of the inline size, and of --bulk.
start_server --rpc --clients 1
"$perf" client --rpc --dev "shm:path=$sock" -a -s 256 -n 100 --warmup 10 --csv "$dir/rpc.csv" --quiet >/dev/null ||
  fail "--rpc -a"
"$perf" client --rpc --dev "shm:path=$sock" -a --bulk 64K -n 50 --warmup 10 --json "$dir/bulk.json" \
  --plot "$dir/bulk.png" --quiet >/dev/null || fail "--rpc -a --bulk"
py "$dir/rpc.csv" "$dir/bulk.json" <<'PY' || fail "rpc sweep: $(cat "$dir/rpc.csv")"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["size"]) for r in rows] == [16, 32, 64, 128, 256] and all(r["transport"] == "rpc" for r in rows), rows
j = json.load(open(sys.argv[2]))["sweep"]
assert [r["bulk"] for r in j] == [16 << k for k in range(13)], [r["bulk"] for r in j]
assert all(r["requests"] == 50 and r["checks"]["stamps"] == r["engine_stats"]["calls"] for r in j), j
PY
[[ -s "$dir/bulk.png" ]] || fail "no sweep plot"
stop_server

# --breakdown: where the round trip goes, on both sides (64 KiB through a read
# chunk, so the server pulls and the client invalidates).
start_server --rpc --breakdown --once
"$perf" client --rpc --breakdown --dev "shm:path=$sock" --bulk 64K --bulk-dir read -n 200 --warmup 10 --quiet \
  >/dev/null 2>"$dir/bd.client" || fail "--breakdown: $(cat "$dir/bd.client")"
wait $spid || fail "server exited with $?"
spid=
py "$dir/bd.client" "$dir/server.log" <<'PY' || fail "breakdown: $(cat "$dir/bd.client" "$dir/server.log")"
import sys
def table(path):
    rows, on = {}, False
    for line in open(path):
        if "where the round trip goes" in line: on = True; continue
        f = line.split()
        if on and len(f) >= 6 and f[1].isdigit(): rows[f[0]] = [int(x) for x in f[1:6]]
    return rows
c, s = table(sys.argv[1]), table(sys.argv[2])
assert list(c) == ["queue", "wire", "invalidate", "complete", "total", "send_done"], c
assert list(s) == ["pull", "wait", "handler", "post", "total"], s
calls = c["total"][0]
assert calls == 210 and all(c[k][0] == calls for k in ("queue", "wire", "invalidate", "complete")), c
assert s["pull"][0] == calls and s["total"][0] == calls, s  # every call had a read chunk to pull
assert c["wire"][1] > 0 and s["pull"][1] > 0, (c, s)
# the stages tile the round trip: their means add up to the total's
assert abs(sum(c[k][1] for k in ("queue", "wire", "invalidate", "complete")) - c["total"][1]) <= 4, c
PY
echo "perf outputs: ok"
