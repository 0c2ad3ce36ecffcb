#!/usr/bin/env bash
# tern-perf end to end over pmd/shm, two processes: the latency and throughput
# reports come out, the JSON parses and agrees with the table, the server
# leaves cleanly, and bad use gets a clear error instead of a hang.
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

# Bad arguments: usage and exit code 2.
set +e
"$perf" client --size 3 >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 2 ]] || fail "bad --size exited $rc"
echo "perf smoke: ok"
