#!/usr/bin/env bash
# tern-nfsd as a program: its command line (bad values are usage errors,
# exit 2), what it refuses to serve (exit 1, saying why), and a run over
# pmd/shm: the line it prints when it serves, MOUNT's NULL answered over
# TCP, counters on SIGUSR1 and at SIGTERM (exit 0), a second server on the
# same address refused. (The NFS side is tests/functional/nfsd_test.cc;
# the kernel client's, tests/vm/nfs-gateway.sh.)
set -euo pipefail
nfsd=$1
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch nfsd-cli
cleanup_signal=KILL
mkdir "$dir/export" "$dir/state"

for bad in "--engines 0" "--engines x" "--port 99999" "--credits 0" "--arena-mb 8" "--cores 1,x"
do
  set +e
  # shellcheck disable=SC2086
  msg=$("$nfsd" --export "$dir/export" --listen shm:path=$dir/s $bad 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "'$bad' exited $rc: $msg"
  (($(wc -l <<<"$msg") == 1)) || fail "'$bad' printed more than one line: $msg"
done
for bad in "--test-crash-after mkdir" "--test-crash-after nosuch:1" "--test-crash-after mkdir:0" "--bogus"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$nfsd" --export "$dir/export" --listen shm:path=$dir/s $bad 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "'$bad' exited $rc: $msg"
done
set +e
msg=$("$nfsd" --listen shm:path=$dir/s 2>&1); rc=$?
[[ $rc == 2 && $msg == *"--export DIR is required"* ]] || fail "no --export: $rc $msg"
msg=$("$nfsd" --export "$dir/export" 2>&1); rc=$?
[[ $rc == 2 && $msg == *"--listen SPEC or --addr IP"* ]] || fail "no address: $rc $msg"
msg=$("$nfsd" --export "$dir/export" --engines 2 --cores 1 --listen shm:path=$dir/s 2>&1); rc=$?
[[ $rc == 2 && $msg == *"names 1 cores for 2 engines"* ]] || fail "--cores too short: $rc $msg"
# Captured first: with pipefail, `prog | grep -q` fails when grep exits at
# its first match while prog still writes (SIGPIPE, status 141).
out=$("$nfsd" --help) || fail "--help exited $?"
grep -q "^usage: tern-nfsd" <<<"$out" || fail "--help"
out=$("$nfsd" --version) || fail "--version exited $?"
grep -q "^tern-nfsd " <<<"$out" || fail "--version"
set -e

if [[ $(id -u) != 0 ]]; then
  echo "nfsd_cli: the command line checked; the rest needs root (open_by_handle_at): not run"
  exit 0
fi
set +e
msg=$("$nfsd" --export "$dir/missing" --listen shm:path=$dir/s --state-dir "$dir/state" 2>&1); rc=$?
[[ $rc == 1 && $msg == *"cannot export $dir/missing"* ]] || fail "missing export: $rc $msg"
msg=$("$nfsd" --export "$dir/export" --listen shm:path=$dir/s --state-dir "$dir/export/state" 2>&1); rc=$?
[[ $rc == 1 && $msg == *"inside the export"* ]] || fail "state inside the export: $rc $msg"
set -e

log=$dir/log
"$nfsd" --export "$dir/export" --name /srv --listen "shm:path=$dir/s" --state-dir "$dir/state" \
  --mount-port 0 --mount-addr 127.0.0.1 --engines 2 >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "tern-nfsd: serving" "$log" && break; sleep 0.1; done
line=$(grep "tern-nfsd: serving" "$log") || fail "no serving line: $(cat "$log")"
[[ $line == *"serving $dir/export as /srv on shm:path=$dir/s,mode=0600, 2 engines; MOUNT tcp 127.0.0.1:"* ]] ||
  fail "serving line: $line"
# tern-nfsd's umask is 0: without mode=0600 its shm socket was born 0777.
[[ $(stat -c %a "$dir/s") == 600 ]] || fail "the shm socket is $(stat -c %a "$dir/s"), not 600"
port=$(sed -n 's/.*MOUNT tcp 127.0.0.1:\([0-9]*\);.*/\1/p' <<<"$line")

# MOUNT v3 NULL over TCP: one record (last-fragment bit, 40 bytes) holding
# xid 0x01020304, CALL, RPC version 2, program 100005, version 3, procedure
# 0, AUTH_NONE credential and verifier. The answer: a 24-byte record,
# REPLY, MSG_ACCEPTED, SUCCESS.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf '\x80\x00\x00\x28\x01\x02\x03\x04\x00\x00\x00\x00\x00\x00\x00\x02\x00\x01\x86\xa5\x00\x00\x00\x03' >&3
printf '\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >&3
reply=$(timeout 5 head -c 28 <&3 | od -An -tx1 | tr -d ' \n')
exec 3<&-
[[ $reply == 80000018010203040000000100000000000000000000000000000000 ]] || fail "MOUNT NULL answered '$reply'"

# A second server on the same address is refused (with a state directory
# of its own: the first one's is locked).
set +e
msg=$("$nfsd" --export "$dir/export" --listen "shm:path=$dir/s" --state-dir "$dir/state2" --mount-port off 2>&1)
rc=$?
set -e
[[ $rc == 1 && $msg == *"cannot listen on shm:path=$dir/s"* ]] || fail "second server: $rc $msg"

kill -USR1 "$pid"
for _ in $(seq 50); do grep -q "tern-nfsd: stats:" "$log" && break; sleep 0.1; done
grep -q "tern-nfsd: stats: .*mounts=0 .*connections=0,0" "$log" || fail "no counters on SIGUSR1: $(cat "$log")"
kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 0 ]] || fail "SIGTERM: exit $rc"
(($(grep -c "tern-nfsd: stats:" "$log") == 2)) || fail "no counters at exit: $(cat "$log")"
echo "nfsd_cli: ok"
