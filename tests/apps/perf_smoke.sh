#!/usr/bin/env bash
# tern-perf end to end over pmd/shm, two processes: the latency and throughput
# reports come out (raw SENDs, and RPC engine calls inline and with bulk
# chunks), the JSON parses and agrees with itself, the servers leave cleanly,
# and bad use gets a clear error instead of a hang.
set -euo pipefail
perf=$1
dir=$(mktemp -d /tmp/tern-perf-test-XXXXXX)
sock="$dir/perf.sock"
trap 'kill $spid 2>/dev/null || true; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$perf" server --dev "shm:path=$sock" --once --quiet &
spid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
[[ -S "$sock" ]] || fail "server did not listen"

"$perf" client --dev "shm:path=$sock" --mode lat --iters 3000 --warmup 100 --size 64 --json "$dir/lat.json" --quiet >"$dir/lat.txt"
grep -q "p99.9" "$dir/lat.txt" || fail "no latency table: $(cat "$dir/lat.txt")"
python3 - "$dir/lat.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] == 3000, r
lat = r["latency_ns"]
assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["p99_9"] <= lat["max"], lat
assert r["size"] == 64 and r["mode"] == "send/lat", r
PY
wait $spid || fail "server exited with $?"

# Throughput with a deeper queue and messages over a page, on a fresh server.
"$perf" server --dev "shm:path=$sock" --once --quiet &
spid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
"$perf" client --dev "shm:path=$sock" --mode bw --qd 16 --size 8192 --iters 5000 --warmup 100 --json "$dir/bw.json" --quiet >"$dir/bw.txt"
python3 - "$dir/bw.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["requests"] == 5000 and r["qd"] == 16 and r["requests_per_s"] > 0 and r["gbps"] > 0, r
PY
wait $spid || fail "server exited with $?"

# Nobody listening: a clear error and exit code 1, promptly.
set +e
msg=$(timeout 20 "$perf" client --dev "shm:path=$dir/nobody.sock" --iters 10 --quiet 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "client to a missing server exited $rc: $msg"
grep -q "nobody listens" <<<"$msg" || fail "unclear error: $msg"

# RPC mode: a tern-perf --rpc server (the RPC engine serving tern-perf's echo
# program) and clients for latency, throughput with 8 calls in flight, and
# 64 KiB bulk through a read chunk and a write chunk. The server serves them
# one after another (--clients 4 is its default) and is stopped with SIGTERM.
# Few calls: on a loaded 2-CPU machine two unpinned busy-pollers may see only
# hundreds of round trips per second.
rpc_check() {  # rpc_check FILE MODE QD BULK DIR
  python3 - "$@" <<'PY'
import json, sys
path, mode, qd, bulk, bulk_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
r = json.load(open(path))
assert r["mode"] == mode and r["transport"] == "rpc", r
assert r["qd"] == qd and r["bulk"] == bulk and r["bulk_dir"] == bulk_dir and r["engines"] == 1, r
assert r["requests"] == 500 and r["seconds"] > 0 and r["requests_per_s"] > 0 and r["gbps"] > 0, r
assert abs(r["requests_per_s"] * r["seconds"] - r["requests"]) <= 0.01 * r["requests"] + 1, r
payload = bulk if bulk else r["size"]
assert abs(r["gbps"] - r["requests_per_s"] * payload * 8 / 1e9) <= 0.01 * r["gbps"] + 1e-3, r
lat = r["latency_ns"]
assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["p99_9"] <= lat["max"], lat
assert lat["samples"] > 0, lat
st, chk = r["engine_stats"], r["checks"]
calls = r["requests"] + 50  # and the warm-up
assert st["calls"] == calls and st["replies"] == calls, st
if bulk == 0:
    assert chk["echo"] == calls and chk["stamps"] == 0, chk
else:
    assert chk["stamps"] == calls and chk["full"] >= 50, chk  # every warm-up call byte for byte
    assert st["read_chunks" if bulk_dir == "read" else "write_chunks"] == calls, st
    # Every chunk's MR is invalidated, by the server (remote) or by us (LOCAL_INV).
    assert st["remote_invalidations"] + st["local_inv_chains"] >= calls, st
PY
}
"$perf" server --rpc --dev "shm:path=$sock" --quiet &
spid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
[[ -S "$sock" ]] || fail "rpc server did not listen"
"$perf" client --rpc --dev "shm:path=$sock" --mode lat --iters 500 --warmup 50 --json "$dir/rpc_lat.json" --quiet >"$dir/rpc_lat.txt"
grep -q "p99.9" "$dir/rpc_lat.txt" || fail "no rpc latency table: $(cat "$dir/rpc_lat.txt")"
rpc_check "$dir/rpc_lat.json" rpc/lat 1 0 none || fail "rpc latency JSON: $(cat "$dir/rpc_lat.json")"
"$perf" client --mode rpc-bw --qd 8 --dev "shm:path=$sock" --iters 500 --warmup 50 --json "$dir/rpc_bw.json" --quiet >/dev/null
rpc_check "$dir/rpc_bw.json" rpc/bw 8 0 none || fail "rpc throughput JSON: $(cat "$dir/rpc_bw.json")"
for d in read write; do
  "$perf" client --rpc --dev "shm:path=$sock" --bulk 64K --bulk-dir $d --iters 500 --warmup 50 \
    --json "$dir/rpc_$d.json" --quiet >/dev/null
  rpc_check "$dir/rpc_$d.json" rpc/lat 1 65536 $d || fail "rpc bulk $d JSON: $(cat "$dir/rpc_$d.json")"
done
kill -TERM $spid
wait $spid || fail "rpc server exited with $? on SIGTERM"
[[ ! -e "$sock" ]] || fail "the rpc server left its socket behind"

# Two engines on each side (engine 1 on the path with .1 appended).
"$perf" server --rpc --engines 2 --dev "shm:path=$sock" --once --quiet &
spid=$!
for _ in $(seq 100); do [[ -S "$sock" && -S "$sock.1" ]] && break; sleep 0.05; done
[[ -S "$sock.1" ]] || fail "rpc server engine 1 did not listen"
"$perf" client --rpc --engines 2 --dev "shm:path=$sock" --mode bw --qd 4 --iters 300 --warmup 50 \
  --json "$dir/rpc_e2.json" --quiet >/dev/null
python3 - "$dir/rpc_e2.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["engines"] == 2 and r["requests"] == 600 and len(r["per_engine"]) == 2, r
assert all(e["requests"] == 300 and e["requests_per_s"] > 0 for e in r["per_engine"]), r
assert r["per_engine"][1]["dev"].endswith(".sock.1"), r
PY
wait $spid || fail "two-engine rpc server exited with $?"

# An RPC client to a raw server: rejected, said clearly, exit code 1.
"$perf" server --dev "shm:path=$sock" --once --quiet 2>/dev/null &
spid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
set +e
msg=$(timeout 20 "$perf" client --rpc --dev "shm:path=$sock" --iters 10 --quiet 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "rpc client to a raw server exited $rc: $msg"
grep -q "rejected" <<<"$msg" || fail "unclear error: $msg"
kill $spid 2>/dev/null || true
wait $spid 2>/dev/null || true

# An RPC client with nobody listening: exit code 1 and the driver's reason.
set +e
msg=$(timeout 20 "$perf" client --rpc --dev "shm:path=$dir/nobody.sock" --iters 10 --quiet 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "rpc client to a missing server exited $rc: $msg"
grep -q "nobody listens" <<<"$msg" || fail "unclear error: $msg"

# Bad arguments: usage and exit code 2.
set +e
"$perf" client --size 3 >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 2 ]] || fail "bad --size exited $rc"
for bad in "client --bulk 64K" "client --rpc --bulk 8" "client --rpc --bulk-dir sideways" "client --rpc --size 18" \
           "client --rpc --qd 0" "server --rpc --bulk 4K" "client --rpc --credits 8" "client --rpc --engines 0" \
           "client --rpc --seconds abc"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$perf" $bad 2>&1 >/dev/null)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "'$bad' exited $rc"
  grep -q "usage:" <<<"$msg" || fail "'$bad' printed no usage: $msg"
done
echo "perf smoke: ok"
