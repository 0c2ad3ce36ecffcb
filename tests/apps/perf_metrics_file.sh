#!/usr/bin/env bash
# tern-perf --metrics FILE (issue 24): when tern-perf exits, FILE holds the
# engines' final counters, parsed with the Prometheus client's own parser.
# The exporter used to write its last file after the engines were gone:
# an exposition with no engine series at all.
#   - two server engines (--once) and two client engines: every engine's
#     tern_engine_calls_total is the client's warm-up + -n calls;
#   - a one-engine server stopped by SIGINT (the other way a run ends);
#   - --metrics without --rpc (raw SENDs, no engine) is refused.
set -uo pipefail
perf=$1
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
# Debian's interpreter: python3-prometheus-client is installed for it.
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" -c 'import prometheus_client.parser' 2>/dev/null || { echo "SKIP: no prometheus_client for $py"; exit 77; }
scratch perf-metrics

# check FILE ENGINES CALLS: every engine 0..ENGINES-1 has calls and replies == CALLS.
check() {
  "$py" - "$@" <<'PY' || fail "$1: $(head -c 2000 "$1")"
import sys
from prometheus_client.parser import text_string_to_metric_families
path, engines, calls = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
got = {}
for fam in text_string_to_metric_families(open(path).read()):
    for s in fam.samples:
        if s.name in ("tern_engine_calls_total", "tern_engine_replies_total"):
            got[(s.name, s.labels["engine"])] = s.value
want = {(n, str(e)): calls for e in range(engines) for n in ("tern_engine_calls_total", "tern_engine_replies_total")}
if got != want:
    sys.exit("%s: %s, want %s" % (path, sorted(got.items()), sorted(want.items())))
PY
}

wait_listening() {  # wait_listening LOG: every engine listens once the server says so
  for _ in $(seq 400); do grep -q "listening on" "$1" && return 0; sleep 0.05; done
  fail "server did not listen: $(cat "$1")"
}

# Two engines each side; 50 calls + 10 warm-up per engine: well under the
# file's 1 s rewrite interval, so only the last write can have them.
"$perf" server --rpc --once --engines 2 --dev "shm:path=$dir/s" --metrics "$dir/server.prom" >"$dir/server.log" 2>&1 &
spid=$!
wait_listening "$dir/server.log"
"$perf" client --rpc --engines 2 --dev "shm:path=$dir/s" -n 50 --warmup 10 --quiet \
  --metrics "$dir/client.prom" >"$dir/client.log" 2>&1 || fail "client: $(cat "$dir/client.log")"
[[ -s $dir/client.prom ]] || fail "the client's metrics file is empty or absent at exit"
check "$dir/client.prom" 2 60
wait "$spid" || fail "server (--once): exit $?: $(cat "$dir/server.log")"
[[ -s $dir/server.prom ]] || fail "the server's metrics file is empty or absent at exit"
check "$dir/server.prom" 2 60

# A server run ended by SIGINT.
rm -f "$dir/s"
"$perf" server --rpc --dev "shm:path=$dir/s" --metrics "$dir/int.prom" >"$dir/int.log" 2>&1 &
spid=$!
wait_listening "$dir/int.log"
"$perf" client --rpc --dev "shm:path=$dir/s" -n 30 --warmup 5 --quiet >"$dir/c2.log" 2>&1 || fail "client: $(cat "$dir/c2.log")"
kill -INT "$spid"
wait "$spid" || fail "server (SIGINT): exit $?: $(cat "$dir/int.log")"
spid=
check "$dir/int.prom" 1 35
# Without --rpc there are no engines: refused rather than an empty file.
msg=$("$perf" client --dev "shm:path=$dir/s" --metrics "$dir/raw.prom" 2>&1)
rc=$?
[[ $rc == 2 && $msg == *"--metrics needs --rpc"* ]] || fail "--metrics without --rpc: exit $rc: $msg"
echo "ok: the metrics files hold every engine's final counters at exit"
