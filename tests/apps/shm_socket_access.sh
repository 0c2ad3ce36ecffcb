#!/usr/bin/env bash
# pmd/shm's socket, through tern-perf: mode= and group= are validated and
# applied, a connect refused for lack of permission says so (it said "nobody
# listens"), and a second server's probe leaves the live server silent.
# The permission cases need root (to run a client as another user); without
# it they are skipped and the rest runs.
set -euo pipefail
perf=$(realpath "$1")
dir=$(mktemp -d /tmp/tern-shm-access-XXXXXX)
chmod 755 "$dir"
sock="$dir/s.sock"
spid=
trap '[[ -n $spid ]] && kill $spid 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
start_server() {  # start_server LOG DEV-SUFFIX
  rm -f "$sock" "$1"  # an old log would say "listening" before the new server truncates it
  "$perf" server --dev "shm:path=$sock$2" 2>"$1" &
  spid=$!
  for _ in $(seq 200); do grep -q "listening" "$1" 2>/dev/null && return 0; sleep 0.05; done
  fail "server did not listen: $(cat "$1")"
}
stop_server() { kill -TERM $spid; wait $spid || fail "server exited with $?"; spid=; }

# Bad values are refused when the device is opened, saying which.
for bad in mode=999 mode=0x1 mode=01777 mode= group=no-such-group-tern group=; do
  set +e
  msg=$("$perf" server --dev "shm:path=$sock,$bad" --quiet 2>&1)
  rc=$?
  set -e
  [[ $rc == 1 ]] || fail "$bad: exited $rc: $msg"
  grep -q "shm: ${bad%%=*}=" <<<"$msg" || fail "$bad: unclear error: $msg"
done
[[ ! -e "$sock" ]] || fail "a refused server left a socket"

# mode= on its own, and a second server's probe: the live server must not
# log it as a bad hello or a dropped connection.
start_server "$dir/live.log" ",mode=0600"
[[ $(stat -c %a "$sock") == 600 ]] || fail "mode=0600 gave $(stat -c %a "$sock")"
set +e
msg=$("$perf" server --dev "shm:path=$sock" --quiet 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] && grep -q "another server is listening" <<<"$msg" || fail "second server: $rc $msg"
"$perf" client --dev "shm:path=$sock" --iters 100 --quiet >/dev/null || fail "the live server stopped serving"
stop_server
if grep -qi "hello\|dropping\|warn" "$dir/live.log"; then fail "the probe made the live server log: $(cat "$dir/live.log")"; fi

if [[ $(id -u) != 0 ]] || ! command -v setpriv >/dev/null || ! getent group nogroup >/dev/null; then
  echo "shm socket access: ok (permission cases skipped: they need root, setpriv and a nogroup group)"
  exit 0
fi
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
as_nobody test -x "$perf" || { echo "shm socket access: ok (permission cases skipped: nobody cannot run $perf)"; exit 0; }

# Owner-only socket: another user's connect is a permission error, named as one.
start_server "$dir/own.log" ",mode=0600"
for t in "" "--rpc"; do
  set +e
  # shellcheck disable=SC2086
  msg=$(as_nobody "$perf" client $t --dev "shm:path=$sock" --iters 10 --quiet 2>&1)
  rc=$?
  set -e
  [[ $rc == 1 ]] || fail "client $t as nobody exited $rc: $msg"
  grep -q "permission denied: shm: cannot connect to $sock (socket mode 0600 owner 0:0" <<<"$msg" || fail "client $t: $msg"
  grep -q "nobody listens" <<<"$msg" && fail "client $t still says nobody listens: $msg"
done
# Another user's second server may not take the path over, and says why.
set +e
msg=$(as_nobody "$perf" server --dev "shm:path=$sock" --quiet 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] && grep -q "permission denied: shm: cannot probe $sock" <<<"$msg" || fail "nobody's server: $rc $msg"
stop_server

# mode=0660,group=nogroup: the group's members may connect.
start_server "$dir/grp.log" ",mode=0660,group=nogroup"
[[ $(stat -c '%a %G' "$sock") == "660 nogroup" ]] || fail "mode/group gave $(stat -c '%a %G' "$sock")"
as_nobody "$perf" client --dev "shm:path=$sock" --iters 100 --quiet >/dev/null || fail "a member of the group could not connect"
stop_server
echo "shm socket access: ok"
