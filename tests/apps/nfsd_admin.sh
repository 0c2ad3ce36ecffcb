#!/usr/bin/env bash
# tern-nfsd as an admin runs it: one instance per state directory (a second
# is refused, naming the first's pid; a killed instance leaves no lock
# behind); an exports file (its mistakes refused with FILE:LINE, several
# exports served) and SIGHUP, which rereads it without dropping connections:
# nfsd-probe holds one connection across the reloads and sees a client no
# longer listed get NFS3ERR_ACCES, a removed export's handles
# NFS3ERR_STALE, a bad file change nothing; the engine's per-peer bounds
# (--max-connections, --idle-reap-ms) from the command line. Needs root (open_by_handle_at);
# says so and passes without it.
set -euo pipefail
nfsd=$1
probe=$2
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
if [[ $(id -u) != 0 ]]; then
  echo "nfsd_admin: needs root (open_by_handle_at): not run"
  exit 0
fi
scratch nfsd-admin
cleanup_signal=KILL
mkdir "$dir/a" "$dir/b" "$dir/state"

# Starts tern-nfsd with the given arguments, its output in $dir/$1.log;
# waits for its serving line. Sets $started to its pid.
start() {
  local log=$dir/$1.log
  shift
  "$nfsd" "$@" >"$log" 2>&1 &
  started=$!
  for _ in $(seq 100); do
    grep -q "tern-nfsd: serving" "$log" && return 0
    kill -0 "$started" 2>/dev/null || fail "tern-nfsd $* exited: $(cat "$log")"
    sleep 0.1
  done
  fail "tern-nfsd $* never served: $(cat "$log")"
}

# ---- one instance per state directory
start first --export "$dir/a" --listen "shm:path=$dir/s1" --state-dir "$dir/state" --mount-port off
first=$started
set +e
msg=$("$nfsd" --export "$dir/b" --listen "shm:path=$dir/s2" --state-dir "$dir/state" --mount-port off 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "a second instance on the state directory exited $rc: $msg"
(($(wc -l <<<"$msg") == 1)) || fail "more than one line: $msg"
[[ $msg == *"in use by another tern-nfsd (pid $first"* && $msg == *"--state-dir"* ]] ||
  fail "the refusal does not name pid $first: $msg"
# Killed (no cleanup at all), it leaves nothing that keeps the next one out.
kill -KILL "$first"
wait "$first" 2>/dev/null || true
start second --export "$dir/b" --listen "shm:path=$dir/s2" --state-dir "$dir/state" --mount-port off
kill -TERM "$started"
wait "$started" || fail "SIGTERM: exit $?"

# ---- the exports file: a mistake is one line naming FILE:LINE (exit 1);
# --export's own flags do not go with it (exit 2)
printf '/x *(rw)\n%s 10.0.0.0/8(rw,bogus)\n' "$dir/a" >"$dir/bad-exports"
set +e
msg=$("$nfsd" --exports "$dir/bad-exports" --listen "shm:path=$dir/s3" --state-dir "$dir/state" 2>&1)
rc=$?
set -e
[[ $rc == 1 && $msg == *"$dir/bad-exports:2: 10.0.0.0/8: unknown option 'bogus'"* ]] || fail "bad exports file: $rc $msg"
(($(wc -l <<<"$msg") == 1)) || fail "more than one line: $msg"
set +e
msg=$("$nfsd" --exports "$dir/bad-exports" --ro --listen "shm:path=$dir/s3" 2>&1); rc=$?
[[ $rc == 2 && $msg == *"go with --export DIR"* ]] || fail "--exports with --ro: $rc $msg"
msg=$("$nfsd" --exports "$dir/bad-exports" --export "$dir/a" --listen "shm:path=$dir/s3" 2>&1); rc=$?
[[ $rc == 2 && $msg == *"alternatives"* ]] || fail "--exports with --export: $rc $msg"
set -e
printf '# two exports\n%s localhost(rw)\n%s 10.0.0.0/8(ro) \\\n  *(ro,all_squash)\n' "$dir/a" "$dir/b" >"$dir/exports"
start third --exports "$dir/exports" --listen "shm:path=$dir/s3" --state-dir "$dir/state" --mount-port off
grep -q "serving $dir/a, $dir/b on shm:path=$dir/s3" "$dir/third.log" || fail "serving line: $(cat "$dir/third.log")"
kill -TERM "$started"
wait "$started" || fail "SIGTERM: exit $?"

# ---- SIGHUP: the file read again, connections kept
printf '%s localhost(rw,no_root_squash)\n%s localhost(rw)\n' "$dir/a" "$dir/b" >"$dir/exports"
: >"$dir/a/f"
start fourth --exports "$dir/exports" --listen "shm:path=$dir/s4" --state-dir "$dir/state" \
  --mount-port 0 --mount-addr 127.0.0.1
srv=$started
log4=$dir/fourth.log
mport=$(sed -n 's/.*MOUNT tcp 127.0.0.1:\([0-9]*\);.*/\1/p' "$log4")
[[ -n $mport ]] || fail "no MOUNT port: $(cat "$log4")"
coproc PROBE { "$probe"; }
ask() {
  echo "$*" >&"${PROBE[1]}"
  local r
  read -r -t 30 -u "${PROBE[0]}" r || fail "nfsd-probe did not answer '$*'"
  echo "$r"
}
expect() {  # expect COMMAND... -- WANT
  local want=${*: -1} got
  got=$(ask "${@:1:$#-2}")
  [[ $got == "$want" ]] || fail "'${*:1:$#-2}': got '$got', want '$want' ($(tail -3 "$log4"))"
}
hup() {  # sends SIGHUP and waits for the answer line matching $1
  local before
  before=$(grep -c "$1" "$log4" || true)
  kill -HUP "$srv"
  for _ in $(seq 100); do
    (($(grep -c "$1" "$log4" || true) > before)) && return 0
    kill -0 "$srv" 2>/dev/null || fail "SIGHUP killed tern-nfsd: $(cat "$log4")"
    sleep 0.1
  done
  fail "no '$1' after SIGHUP: $(cat "$log4")"
}
read -r _ _ fa < <(ask mnt 127.0.0.1 "$mport" "$dir/a")
read -r _ _ fb < <(ask mnt 127.0.0.1 "$mport" "$dir/b")
[[ $fa != - && $fb != - ]] || fail "MNT gave no handles"
expect exports 127.0.0.1 "$mport" -- "exports $dir/a:localhost $dir/b:localhost"
expect connect "shm:path=$dir/s4" -- "connect ok"
expect getattr "$fa" -- "getattr 0"
expect getattr "$fb" -- "getattr 0"
read -r _ st ff < <(ask lookup "$fa" f)
[[ $st == 0 ]] || fail "LOOKUP of a/f: $st"
expect write "$ff" -- "write 0"
# a now lists another network only; b is gone.
printf '%s 10.0.0.0/8(rw)\n' "$dir/a" >"$dir/exports"
hup "reloaded $dir/exports"
expect getattr "$fa" -- "getattr 13"
expect getattr "$fb" -- "getattr 70"
expect mnt 127.0.0.1 "$mport" "$dir/a" -- "mnt 13 -"
expect mnt 127.0.0.1 "$mport" "$dir/b" -- "mnt 2 -"
expect exports 127.0.0.1 "$mport" -- "exports $dir/a:10.0.0.0/8"
expect conn -- "conn ready 0"
# A file with a mistake changes nothing, and says why.
printf '%s localhost(rw)\n%s localhost(rw,bogus)\n' "$dir/a" "$dir/b" >"$dir/exports"
hup "reload of $dir/exports refused"
grep -q "reload of $dir/exports refused, still serving $dir/a: $dir/exports:2: localhost: unknown option 'bogus'" \
  "$log4" || fail "the refusal does not say why: $(tail -2 "$log4")"
expect getattr "$fa" -- "getattr 13"
# Back, a read-only now: the same handles are good again.
printf '%s localhost(ro,no_root_squash)\n%s localhost(rw)\n' "$dir/a" "$dir/b" >"$dir/exports"
hup "reloaded $dir/exports"
expect getattr "$fb" -- "getattr 0"
expect write "$ff" -- "write 30"  # NFS3ERR_ROFS: the same handle, a read-only entry now
expect conn -- "conn ready 0"
kill -USR1 "$srv"
for _ in $(seq 50); do grep -q "tern-nfsd: stats:" "$log4" && break; sleep 0.1; done
grep -q "tern-nfsd: stats: .*connections=1" "$log4" || fail "the connection did not stay: $(grep stats: "$log4")"
grep -q "tern-nfsd: stats: .* refused=2 " "$log4" || fail "calls refused not counted: $(grep stats: "$log4")"
exec {PROBE[1]}>&-
kill -TERM "$srv"
wait "$srv" || fail "SIGTERM after reloads: exit $?"

# ---- a pidfile, locked while the instance lives and removed at a clean
# exit; every line of the log timestamped; MOUNT on loopback with a shm
# listener
set +e
msg=$("$nfsd" --exports "$dir/exports" --listen "shm:path=$dir/s5" --state-dir "$dir/state" --mount-port 0 \
  --pidfile "$dir/run/tern-nfsd.pid" 2>&1)
rc=$?
set -e
[[ $rc == 1 && $msg == *"cannot open $dir/run/tern-nfsd.pid"* ]] || fail "pidfile in a missing directory: $rc $msg"
mkdir "$dir/run"
start fifth --exports "$dir/exports" --listen "shm:path=$dir/s5" --state-dir "$dir/state" --mount-port 0 \
  --pidfile "$dir/run/tern-nfsd.pid"
srv=$started
[[ $(cat "$dir/run/tern-nfsd.pid") == "$srv" ]] || fail "pidfile holds '$(cat "$dir/run/tern-nfsd.pid")', not $srv"
grep -q "MOUNT tcp 127.0.0.1:" "$dir/fifth.log" || fail "MOUNT not on loopback with shm: $(cat "$dir/fifth.log")"
set +e
msg=$("$nfsd" --export "$dir/b" --listen "shm:path=$dir/s6" --state-dir "$dir/state6" --mount-port off \
  --pidfile "$dir/run/tern-nfsd.pid" 2>&1)
rc=$?
set -e
[[ $rc == 1 && $msg == *"pidfile $dir/run/tern-nfsd.pid is in use by another tern-nfsd (pid $srv"* ]] ||
  fail "a second instance on the pidfile: $rc $msg"
[[ $(cat "$dir/run/tern-nfsd.pid") == "$srv" ]] || fail "the refused instance touched the pidfile"
# A start that fails after taking the pidfile leaves none behind.
set +e
msg=$("$nfsd" --export "$dir/missing" --listen "shm:path=$dir/s6" --state-dir "$dir/state6" --mount-port off \
  --pidfile "$dir/run/other.pid" 2>&1)
rc=$?
set -e
[[ $rc == 1 && ! -e $dir/run/other.pid ]] || fail "a failed start: $rc, pidfile $(ls "$dir/run")"
kill -USR1 "$srv"
for _ in $(seq 50); do grep -q "tern-nfsd: stats:" "$dir/fifth.log" && break; sleep 0.1; done
kill -TERM "$srv"
wait "$srv" || fail "SIGTERM: exit $?"
[[ ! -e $dir/run/tern-nfsd.pid ]] || fail "the pidfile stayed after a clean exit"
# ---- the engine's per-peer bounds from the command line: a table of one
# connection that is never reaped refuses a second client (another process,
# so another peer on pmd/shm) while the first holds it, and takes it once
# the first has gone.
start seventh --export "$dir/a" --listen "shm:path=$dir/s7" --state-dir "$dir/state7" --mount-port off \
  --max-connections 1 --idle-reap-ms 0 --rw-timeout-ms 2000 --max-connections-per-peer 1
srv=$started
mkfifo "$dir/holder.in"
"$probe" <"$dir/holder.in" >"$dir/holder.out" 2>&1 &
holder=$!
pids+=("$holder")
exec 7>"$dir/holder.in"
echo "connect shm:path=$dir/s7" >&7
for _ in $(seq 300); do grep -q "^connect" "$dir/holder.out" && break; sleep 0.1; done
[[ $(cat "$dir/holder.out") == "connect ok" ]] || fail "the first client: $(cat "$dir/holder.out")"
r=$(echo "connect shm:path=$dir/s7" | timeout 60 "$probe") || true
[[ $r == "connect failed"* ]] || fail "a second client in a full table of one: '$r'"
grep -q "refusing connections (first: pid " "$dir/seventh.log" || fail "no refusal line: $(cat "$dir/seventh.log")"
exec 7>&-  # the holder reads EOF and exits: its connection goes
wait "$holder" 2>/dev/null || true
ok=
for _ in $(seq 20); do
  r=$(echo "connect shm:path=$dir/s7" | timeout 60 "$probe") || true
  [[ $r == "connect ok" ]] && { ok=1; break; }
  sleep 0.5
done
[[ -n $ok ]] || fail "the table of one never took a client again: '$r' ($(tail -3 "$dir/seventh.log"))"
kill -TERM "$srv"
wait "$srv" || fail "SIGTERM: exit $?"

ts='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z tern (error|warn|info|debug) '
for l in "$dir"/*.log; do
  bad=$(grep -Ev "$ts" "$l" || true)
  [[ -z $bad ]] || fail "$l: lines without a timestamp: $bad"
done
grep -Eq "${ts}tern-nfsd: reload of $dir/exports refused" "$dir/fourth.log" || fail "reload line: $(cat "$dir/fourth.log")"

echo "nfsd_admin: ok"
