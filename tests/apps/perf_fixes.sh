#!/usr/bin/env bash
# tern-perf's bugs from issue 13, one check each; every check failed on the
# tool as it was (the comment says how).
set -euo pipefail
perf=$(realpath "$1")
dir=$(mktemp -d /tmp/tern-perf-fixes-XXXXXX)
sock="$dir/perf.sock"
spid=
trap '[[ -n $spid ]] && kill $spid 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
start_server() {  # start_server LOG ARGS...: a server on $sock, wait until it listens
  local log=$1
  shift
  rm -f "$sock" "$log"  # an old log would say "listening" before the new server truncates it
  "$perf" server --dev "shm:path=$sock" "$@" 2>"$log" &
  spid=$!
  for _ in $(seq 200); do grep -q "listening" "$log" 2>/dev/null && return 0; sleep 0.05; done
  fail "server did not listen: $(cat "$log")"
}
stop_server() {
  kill -TERM $spid
  wait $spid || fail "server exited with $? on SIGTERM"
  spid=
}
json() {  # json FILE EXPR: a Python expression over r, the parsed JSON
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
client() { "$perf" client --dev "shm:path=$sock" "$@"; }

start_server "$dir/server.log"

# --size 8, the documented minimum: was "response 0 is corrupt" every time.
client --size 8 --iters 300 --warmup 10 --json "$dir/s8.json" --quiet >/dev/null || fail "--size 8 failed"
[[ $(json "$dir/s8.json" 'r["requests"] == 300 and r["size"] == 8') == True ]] || fail "--size 8: $(cat "$dir/s8.json")"

# --warmup 0 --iters N: reported 0 req/s (the clock never started).
client --warmup 0 --iters 500 --json "$dir/w0i.json" --quiet >/dev/null || fail "--warmup 0 --iters failed"
[[ $(json "$dir/w0i.json" 'r["requests"] == 500 and r["requests_per_s"] > 0 and r["seconds"] > 0') == True ]] ||
  fail "--warmup 0 --iters: $(cat "$dir/w0i.json")"

# --warmup 0 --seconds 1: never ended.
set +e
timeout 30 "$perf" client --dev "shm:path=$sock" --warmup 0 --seconds 1 --json "$dir/w0s.json" --quiet >/dev/null
rc=$?
set -e
[[ $rc == 0 ]] || fail "--warmup 0 --seconds 1 exited $rc (124: it never ended)"
[[ $(json "$dir/w0s.json" 'r["requests"] > 0 and 0.9 <= r["seconds"] < 5') == True ]] ||
  fail "--warmup 0 --seconds 1: $(cat "$dir/w0s.json")"

# --iters 8G: aborted at once with bad_alloc (a sample kept per request). Now
# it runs in fixed memory until stopped: its first progress line (a second
# into the run) says it is making requests; then it must still be there.
"$perf" client --dev "shm:path=$sock" --iters 8G >/dev/null 2>"$dir/8g.err" &
cpid=$!
for _ in $(seq 600); do
  grep -q "requests$\|req/s$" "$dir/8g.err" && break
  kill -0 $cpid 2>/dev/null || break
  sleep 0.05
done
kill -0 $cpid 2>/dev/null || { wait $cpid; fail "--iters 8G exited $? at once: $(cat "$dir/8g.err")"; }
grep -q "requests$\|req/s$" "$dir/8g.err" || fail "--iters 8G made no progress in 30 s: $(cat "$dir/8g.err")"
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$cpid/status")
kill -KILL $cpid
wait $cpid 2>/dev/null || true
((rss < 200000)) || fail "--iters 8G uses ${rss} KiB"

# --json to a bad path: the run was made and then lost (exit 1 after it).
# Now nothing runs: exit 2 at once, before any report.
set +e
client --iters 100 --json "$dir/no/such/dir/x.json" --quiet >"$dir/bad.out" 2>"$dir/bad.err"
rc=$?
set -e
[[ $rc == 2 ]] || fail "--json to a bad path exited $rc: $(cat "$dir/bad.err")"
grep -q "cannot write $dir/no/such/dir/x.json" "$dir/bad.err" || fail "--json bad path: $(cat "$dir/bad.err")"
[[ ! -s "$dir/bad.out" ]] || fail "--json bad path: a run was made: $(cat "$dir/bad.out")"

# --json -: stdout is the JSON alone (it was a file named "-").
(cd "$dir" && client --iters 200 --json - --quiet >"$dir/stdout.json" 2>"$dir/stderr.txt") || fail "--json - failed"
[[ ! -e "$dir/-" ]] || fail "--json - wrote a file named -"
[[ $(json "$dir/stdout.json" 'r["requests"]') == 200 ]] || fail "--json -: stdout is $(cat "$dir/stdout.json")"
grep -q "round trip" "$dir/stderr.txt" || fail "--json -: the human report is not on stderr"

# A clean run leaves no error line on the server. It said "send failed: WR
# flushed" in the README's main job when a client left with echoes still
# queued; that did not happen on demand here (so this check may pass on the
# old server too): it guards the clean-run case, and the server now treats a
# flushed SEND as the client leaving.
for qd in 32 64; do
  client --mode bw --qd $qd --size 4096 --iters 20000 --warmup 100 --quiet >/dev/null || fail "bw qd $qd failed"
done
stop_server
grep -qi "fail\|error" "$dir/server.log" && fail "the server reported an error in a clean run: $(cat "$dir/server.log")"
[[ ! -e "$sock" ]] || fail "the server left its socket behind on SIGTERM"

# A raw client against an RPC server: was "response 72057594037927936 is corrupt".
rm -f "$sock"
"$perf" server --rpc --clients 1 --dev "shm:path=$sock" 2>"$dir/rpc.log" &
spid=$!
for _ in $(seq 200); do grep -q "listening" "$dir/rpc.log" 2>/dev/null && break; sleep 0.05; done
set +e
msg=$(timeout 30 "$perf" client --dev "shm:path=$sock" --iters 10 --quiet 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "raw client to an rpc server exited $rc: $msg"
grep -q "speaks RPC" <<<"$msg" && grep -q -- "--rpc" <<<"$msg" || fail "raw client to an rpc server: $msg"

# A lost connection: was "call N failed: disconnected: disconnected: ...".
# The server dies once the client's first progress line (a second into the
# run) says its calls are going.
"$perf" client --rpc --dev "shm:path=$sock" --seconds 20 >/dev/null 2>"$dir/lost.err" &
cpid=$!
for _ in $(seq 600); do
  grep -q " calls$\|RPC/s" "$dir/lost.err" && break
  kill -0 $cpid 2>/dev/null || break
  sleep 0.05
done
grep -q " calls$\|RPC/s" "$dir/lost.err" || fail "the rpc client made no progress: $(cat "$dir/lost.err")"
kill -KILL $spid
wait $spid 2>/dev/null || true
spid=
set +e
wait $cpid
rc=$?
set -e
[[ $rc == 1 ]] || fail "rpc client after the server died exited $rc: $(cat "$dir/lost.err")"
grep -q "disconnected: disconnected" "$dir/lost.err" && fail "doubled prefix: $(cat "$dir/lost.err")"
grep -q "disconnected" "$dir/lost.err" || fail "no reason given: $(cat "$dir/lost.err")"

# A bad flag: was an error and fifty lines of usage. Now one line, a hint
# and the usage line.
for bad in "client --secnds 2" "client --size 3" "client --qd" "server --bulk 4K"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$perf" $bad 2>&1 >/dev/null)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "'$bad' exited $rc"
  (($(wc -l <<<"$msg") <= 2)) || fail "'$bad' printed $(wc -l <<<"$msg") lines: $msg"
  grep -q "^usage: tern-perf" <<<"$msg" || fail "'$bad' gave no usage line: $msg"
done
msg=$("$perf" client --secnds 2 2>&1 >/dev/null || true)
grep -q "did you mean '--seconds'?" <<<"$msg" || fail "no hint for --secnds: $msg"

# The RPC --size limit is the real one (3992, the 4 KiB inline threshold),
# checked at parse time, and the help says so (it said 64 KiB). The
# --clients help said a closed connection's buffers are never reused.
help=$("$perf" --help)
grep -q "16 to 3992" <<<"$help" || fail "--help does not give the --rpc --size limit"
grep -qi "never reuses" <<<"$help" && fail "--help still says buffers are never reused"
set +e
"$perf" client --rpc --size 3996 >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 2 ]] || fail "--rpc --size 3996 exited $rc, not 2 (bad usage)"

# The warm-up: bounded in time by default (a 16 MiB bulk run spent 31 s
# silent in 1000 fully checked warm-up calls), with progress when it is long.
rm -f "$sock"
"$perf" server --rpc --clients 1 --credits 2 --max-bulk 4M --dev "shm:path=$sock" 2>"$dir/rpc2.log" &
spid=$!
for _ in $(seq 400); do grep -q "listening" "$dir/rpc2.log" 2>/dev/null && break; sleep 0.05; done
timeout 120 "$perf" client --rpc --dev "shm:path=$sock" --bulk 4M --iters 5 --json "$dir/big.json" --quiet \
  >/dev/null || fail "4 MiB bulk run failed"
# Bounded in time: 1 s, plus the calls in flight when it ends (a fast
# machine may also finish the 1000 calls first; either way, never 31 s).
[[ $(json "$dir/big.json" 'r["warmup"]["calls"] > 0 and r["warmup"]["seconds"] < 5') == True ]] ||
  fail "the default warm-up of 4 MiB calls was not bounded in time: $(cat "$dir/big.json")"
[[ $(json "$dir/big.json" 'r["warmup"]["calls"] >= 1000 or r["warmup"]["seconds"] >= 1') == True ]] ||
  fail "the default warm-up ended before 1000 calls or 1 s: $(cat "$dir/big.json")"
timeout 60 "$perf" client --rpc --dev "shm:path=$sock" --warmup 2s --iters 10 >/dev/null 2>"$dir/warm.err" ||
  fail "--warmup 2s failed: $(cat "$dir/warm.err")"
grep -q "warm-up" "$dir/warm.err" || fail "no warm-up progress: $(cat "$dir/warm.err")"
stop_server
echo "perf fixes: ok"
