#!/usr/bin/env bash
# tern-nfs-read against tests/apps/fake_nfsd.cc over pmd/shm (issue 10):
#  - a plain read: data verified, the report's recovery line all zeros;
#  - a server that answers NFS4ERR_DELAY to the first READs: the read
#    completes (verified) and the JSON counts the DELAY retries;
#  - a server that holds every READ (stopped, connection kept): with
#    --timeout 1 the run fails within a few seconds naming the timeout,
#    instead of waiting for ever (it waited 42 s with --timeout 3000 against
#    a stalled kernel server, READs had no deadline).
set -euo pipefail
nfs=$1
fake=$2
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch nfs-recovery

start_fake() {  # start_fake NAME ARGS...: a fake server on $dir/NAME.sock
  local name=$1
  shift
  "$fake" --path "$dir/$name.sock" --size 1048576 "$@" >"$dir/$name.out" 2>&1 &
  for _ in $(seq 100); do
    grep -q listening "$dir/$name.out" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "fake-nfsd $name did not start: $(cat "$dir/$name.out")"
}

# The file the fake server serves, for --verify.
python3 -c "
import sys
sys.stdout.buffer.write(bytes(((o * 7 + (o >> 9) + 3) & 0xff) for o in range(1048576)))" >"$dir/local.bin"

start_fake plain
out=$(timeout 60 "$nfs" --server fake --dev "shm:path=$dir/plain.sock" --path /f -s 256K -q 4 \
      --verify "$dir/local.bin" --quiet 2>&1) || fail "plain read: $out"
grep -q "1048576 bytes" <<<"$out" || fail "plain read: $out"
grep -q "verify against .*: identical" <<<"$out" || fail "plain read not verified: $out"
grep -q "recovery: 0 reconnects, 0 READs retransmitted, 0 NFS4ERR_DELAY retries" <<<"$out" || fail "recovery line: $out"

start_fake delay --delay-reads 3
json=$(timeout 60 "$nfs" --server fake --dev "shm:path=$dir/delay.sock" --path /f -s 256K -q 1 \
       --verify "$dir/local.bin" --quiet --json - 2>"$dir/delay.err") || fail "DELAY read: $(cat "$dir/delay.err")"
grep -q '"delay_retries":3' <<<"$json" || fail "DELAY retries not counted: $json"
grep -q '"verified":true' <<<"$json" || fail "DELAY read not verified: $json"

start_fake stall --stall-reads
t0=$(date +%s%N)
set +e
msg=$(timeout 60 "$nfs" --server fake --dev "shm:path=$dir/stall.sock" --path /f --timeout 1 --quiet 2>&1)
rc=$?
set -e
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $rc == 1 ]] || fail "stalled READs: exit $rc after $ms ms: $msg"
grep -qi "timed out" <<<"$msg" || fail "stalled READs: no timeout named: $msg"
((ms < 8000)) || fail "stalled READs with --timeout 1 took $ms ms: $msg"
echo "nfs-read recovery: ok (stalled READs ended after $ms ms with --timeout 1)"
