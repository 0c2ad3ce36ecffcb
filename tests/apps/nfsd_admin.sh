#!/usr/bin/env bash
# tern-nfsd as an admin runs it: one instance per state directory (a second
# is refused, naming the first's pid; a killed instance leaves no lock
# behind); an exports file (its mistakes refused with FILE:LINE, several
# exports served). Needs root (open_by_handle_at); says so and passes
# without it.
set -euo pipefail
nfsd=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ $(id -u) != 0 ]]; then
  echo "nfsd_admin: needs root (open_by_handle_at): not run"
  exit 0
fi
dir=$(mktemp -d /tmp/tern-nfsd-admin.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir "$dir/a" "$dir/b" "$dir/state"

# Starts tern-nfsd with the given arguments, its output in $dir/$1.log;
# waits for its serving line. Sets $started to its pid.
start() {
  local log=$dir/$1.log
  shift
  "$nfsd" "$@" >"$log" 2>&1 &
  started=$!
  pids+=("$started")
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

echo "nfsd_admin: ok"
