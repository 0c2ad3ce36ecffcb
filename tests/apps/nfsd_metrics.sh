#!/usr/bin/env bash
# A running tern-nfsd's per-procedure latency in Prometheus (issue 24's
# "done when"): tern-nfsd --metrics PORT, NFSv3 calls from nfsd-probe over
# shm, then GET /metrics parsed with the Prometheus client's own parser:
# GETATTR's and LOOKUP's latency histograms count exactly the calls made.
#   nfsd_metrics.sh TERN_NFSD NFSD_PROBE
set -uo pipefail
nfsd=$1
probe=$2
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" -c 'import prometheus_client.parser' 2>/dev/null || { echo "SKIP: no prometheus_client for $py"; exit 77; }
if [[ $(id -u) != 0 ]]; then
  echo "nfsd_metrics: needs root (open_by_handle_at): not run"
  exit 0
fi
scratch nfsd-metrics
mkdir "$dir/export" "$dir/state"
printf 'abc' >"$dir/export/f"
# A free port (released again: a race with another program is possible, and fails loudly).
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$nfsd" --export "$dir/export" --listen "shm:path=$dir/s" --state-dir "$dir/state" --mount-port 0 \
  --mount-addr 127.0.0.1 --metrics "$port" >"$dir/log" 2>&1 &
srv=$!
for _ in $(seq 100); do
  grep -q "tern-nfsd: serving" "$dir/log" && break
  kill -0 "$srv" 2>/dev/null || fail "tern-nfsd exited: $(cat "$dir/log")"
  sleep 0.1
done
mport=$(sed -n 's/.*MOUNT tcp 127.0.0.1:\([0-9]*\);.*/\1/p' "$dir/log")
[[ -n $mport ]] || fail "no MOUNT port: $(cat "$dir/log")"
root=$(printf 'mnt 127.0.0.1 %s %s\n' "$mport" "$dir/export" | timeout 60 "$probe" | awk '{print $3}')
[[ $root != - && -n $root ]] || fail "MNT: $root"
out=$(printf 'connect shm:path=%s/s\nlookup %s f\ngetattr %s\ngetattr %s\ngetattr %s\n' \
  "$dir" "$root" "$root" "$root" "$root" | timeout 60 "$probe")
[[ $(grep -c "^getattr 0$" <<<"$out") == 3 ]] || fail "probe: $out"
curl -sf "http://127.0.0.1:$port/metrics" >"$dir/metrics" || fail "GET /metrics on $port: $(cat "$dir/log")"
"$py" - "$dir/metrics" <<'PY' || fail "$(grep -E 'tern_proc_rtt_seconds_count|tern_proc_ops' "$dir/metrics")"
import sys
from prometheus_client.parser import text_string_to_metric_families
got = {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in fam.samples:
        if s.name in ("tern_proc_rtt_seconds_count", "tern_proc_ops_total") and s.labels.get("prog") == "nfs":
            got[(s.name, s.labels["proc"])] = got.get((s.name, s.labels["proc"]), 0) + s.value
want = {("tern_proc_rtt_seconds_count", "GETATTR"): 3, ("tern_proc_ops_total", "GETATTR"): 3,
        ("tern_proc_rtt_seconds_count", "LOOKUP"): 1, ("tern_proc_ops_total", "LOOKUP"): 1}
bad = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
if bad:
    sys.exit("got, want: %s" % bad)
PY
echo "ok: tern-nfsd's /metrics, parsed by prometheus_client: GETATTR x3 and LOOKUP x1 timed per procedure"
