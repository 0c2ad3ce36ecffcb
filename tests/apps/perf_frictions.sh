#!/usr/bin/env bash
# tern-perf's frictions from issue 24, one check each:
#  - a raw server survives a waiting client that gave up (it exited rc 1
#    when it came to accept the departed client) and serves the next;
#  - the waiting client says what it waited for, not just "timed out";
#  - -n with -D is refused (-D was silently ignored);
#  - a server-only flag on the client is refused with a hint (--once);
#  - perftest's -t and a positional host get a hint;
#  - JSON says busy: null for a run too short to judge (not false).
set -uo pipefail
perf=$1
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch perf-frictions

usage() {  # usage WHAT EXPECTED-TEXT ARGS...: exit 2 and the text on stderr
  local what=$1 want=$2
  shift 2
  msg=$("$perf" "$@" 2>&1 >/dev/null)
  rc=$?
  [[ $rc == 2 && $msg == *"$want"* ]] || fail "$what: exit $rc: $msg"
}
usage "-n with -D" "give --iters (-n) or --seconds (-D), not both" client -n 100 -D 2
usage "--once on the client" "--once is a server option (tern-perf server --once" client --once
usage "perftest's -t" "is --qd/-q here" client -t 64
usage "a positional host" "takes no server host" client 192.168.1.1

sock=$dir/s
"$perf" server --dev "shm:path=$sock" >"$dir/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || fail "server did not listen: $(cat "$dir/server.log")"
# Client A holds the server for 3 s; client B waits for it and gives up.
"$perf" client --dev "shm:path=$sock" --seconds 3 --warmup 10 >"$dir/a.log" 2>&1 &
apid=$!
# B only once A is being served (its first progress line).
for _ in $(seq 400); do grep -q "req/s" "$dir/a.log" && break; sleep 0.05; done
grep -q "req/s" "$dir/a.log" || fail "client A never ran: $(cat "$dir/a.log")"
msg=$("$perf" client --dev "shm:path=$sock" --timeout 0.5 -n 100 --quiet 2>&1)
rc=$?
[[ $rc == 1 ]] || fail "the waiting client: exit $rc: $msg"
[[ $msg == *"did not accept the connection within 0.5 s: it is busy with another client"* ]] ||
  fail "the waiting client does not say what it waited for: $msg"
wait "$apid" || fail "client A: $(cat "$dir/a.log")"
# The server now meets B's request: B is gone; it must keep serving.
sleep 0.5
kill -0 "$spid" 2>/dev/null || { wait "$spid"; fail "the server exited ($?) after a waiting client gave up: $(cat "$dir/server.log")"; }
json=$("$perf" client --dev "shm:path=$sock" -n 20 --warmup 5 --quiet --json - 2>"$dir/c.err") ||
  fail "the next client after a departed one: $(cat "$dir/c.err") $(cat "$dir/server.log")"
grep -q "a client left before it was accepted" "$dir/server.log" || fail "the server did not say: $(cat "$dir/server.log")"
# 20 requests take far less than the 0.2 s needed to judge the CPU share
# (on an idle machine; on a loaded one the run may last longer, and then
# busy must be a judgement, true or false).
python3 - "$json" <<'PY' || fail "busy in: $json"
import json, sys
r = json.loads(sys.argv[1])
assert (r["busy"] is None) if r["seconds"] < 0.2 else isinstance(r["busy"], bool), (r["seconds"], r["busy"])
PY
echo "ok: departed client survived, waiting client explained, -n/-D, --once, -t, host hints, busy null"
