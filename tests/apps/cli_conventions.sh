#!/usr/bin/env bash
# The command-line conventions every program shares (apps/option_parser.h,
# docs/tools.md "Command lines"), checked on the tools themselves:
# --opt=value as well as --opt value (tern-nfsd refused --export=DIR), a
# did-you-mean for a mistyped option, a bad value naming the option, exit
# status 2 for all of them.
set -euo pipefail
nfsd=$1 perf=$2 nfs_read=$3 soak=$4
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch cli-conventions
cleanup_signal=KILL
mkdir "$dir/export" "$dir/state"

run() {  # run CMD...: sets $msg (stderr and stdout) and $rc
  set +e
  msg=$("$@" 2>&1)
  rc=$?
  set -e
}

# --export=DIR is --export DIR: parsed, so what is missing is the listener.
run "$nfsd" --export="$dir/export"
[[ $rc == 2 && $msg == *"give --listen SPEC or --addr IP"* ]] || fail "--export=DIR: $rc $msg"
run "$nfsd" --export "$dir/export"
[[ $rc == 2 && $msg == *"give --listen SPEC or --addr IP"* ]] || fail "--export DIR: $rc $msg"
# Every option with a value takes both forms; a bad value names the option.
run "$nfsd" --export="$dir/export" --listen="shm:path=$dir/s" --engines=0
[[ $rc == 2 && $msg == *"option '--engines' expects a count in [1, 64]"* ]] || fail "--engines=0: $rc $msg"
run "$nfsd" --export="$dir/export" --listen="shm:path=$dir/s" --port=99999
[[ $rc == 2 && $msg == *"option '--port' expects a whole number in [0, 65535], not '99999'"* ]] ||
  fail "--port=99999: $rc $msg"
run "$nfsd" --export="$dir/export" --listen="shm:path=$dir/s" --mount-port
[[ $rc == 2 && $msg == *"option '--mount-port' needs a value"* ]] || fail "--mount-port at the end: $rc $msg"
run "$nfsd" --export="$dir/export" --export="$dir/state" --listen="shm:path=$dir/s"
[[ $rc == 2 && $msg == *"option '--export' given twice"* ]] || fail "--export twice: $rc $msg"

# A mistyped option: one line with the nearest name, exit 2, on every tool.
run "$nfsd" --exprot "$dir/export" --listen "shm:path=$dir/s"
[[ $rc == 2 && $msg == *"unknown option '--exprot'; did you mean '--export'?"* ]] || fail "nfsd --exprot: $rc $msg"
(($(wc -l <<<"$msg") == 1)) || fail "nfsd --exprot printed more than one line: $msg"
run "$perf" client --secnds 2
[[ $rc == 2 && $msg == *"unknown option '--secnds'; did you mean '--seconds'?"* ]] || fail "perf --secnds: $rc $msg"
run "$nfs_read" --sever 192.0.2.1 --path /x
[[ $rc == 2 && $msg == *"unknown option '--sever'; did you mean '--server'?"* ]] || fail "nfs-read --sever: $rc $msg"
run "$soak" --seeed 1
[[ $rc == 2 && $msg == *"unknown option '--seeed'; did you mean '--seed'?"* ]] || fail "soak --seeed: $rc $msg"
# A long option typed with one dash (where no short option takes its first
# letter: tern-perf's -seconds is -s econds, as with getopt).
run "$nfsd" -export "$dir/export"
[[ $rc == 2 && $msg == *"unknown option '-export'; did you mean '--export'?"* ]] || fail "nfsd -export: $rc $msg"
# -- ends the options: what follows is an argument, which tern-perf has none of.
run "$perf" client -- --seconds 2
[[ $rc == 2 && $msg == *"unexpected argument '--seconds'"* ]] || fail "perf -- --seconds: $rc $msg"
# Both value forms of the short options too.
run "$perf" client -s3 --rpc
[[ $rc == 2 && $msg == *"--size must be 16 to 3992"* ]] || fail "perf -s3: $rc $msg"
# --help comes from the same table: every option is in it.
help=$("$nfsd" --help)
for o in --export --exports --listen --mount-port --nlm-port --storage --test-crash-after; do
  grep -q -- "  $o " <<<"$help" || fail "tern-nfsd --help lacks $o"
done

if [[ $(id -u) != 0 ]]; then
  echo "cli_conventions: the parsing checked; serving with --opt=value needs root (open_by_handle_at): not run"
  exit 0
fi
# tern-nfsd started with every value in the --opt=value form serves.
log=$dir/log
"$nfsd" --export="$dir/export" --name=/srv --listen="shm:path=$dir/s" --state-dir="$dir/state" \
  --mount-port=0 --mount-addr=127.0.0.1 --nlm-port=off --no-rpcbind --engines=1 >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "tern-nfsd: serving" "$log" && break; sleep 0.1; done
line=$(grep "tern-nfsd: serving" "$log") || fail "no serving line: $(cat "$log")"
[[ $line == *"serving $dir/export as /srv on shm:path=$dir/s,mode=0600, 1 engine"* ]] || fail "serving line: $line"
kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 0 ]] || fail "SIGTERM: exit $rc"
echo "cli_conventions: ok"
