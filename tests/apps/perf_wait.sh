#!/usr/bin/env bash
# tern-perf --rpc --wait (the engine's wait mode, both ends): every call of a
# run completes and is checked, and an idle server sleeps instead of spinning
# (the server's CPU time over an idle second is far below the second a
# busy-polling server burns; measure-wait.sh gives the figures).
set -euo pipefail
perf=$1
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch perf-wait
sock=$dir/s
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

"$perf" server --rpc --wait --dev "shm:path=$sock" --quiet &
server_pid=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || fail "server did not listen"
c0=$(cpu_of "$server_pid"); sleep 1; c1=$(cpu_of "$server_pid")
python3 -c "import sys; sys.exit(0 if $c1 - $c0 < 0.3 else 1)" ||
  fail "an idle --wait server used $(python3 -c "print($c1 - $c0)") s of CPU in 1 s: it spins"

out=$("$perf" client --rpc --wait --dev "shm:path=$sock" --mode lat -n 2000 --warmup 100 2>&1) ||
  fail "client --wait failed: $out"
grep -q "checked" <<<"$out" || fail "no checked calls: $out"
grep -qi "corrupt\|failed" <<<"$out" && fail "errors in the run: $out"
out=$("$perf" client --rpc --wait --dev "shm:path=$sock" --mode bw --qd 16 --bulk 64K -n 2000 --warmup 100 2>&1) ||
  fail "client --wait with 64 KiB chunks failed: $out"
echo "ok: --wait server idle CPU $(python3 -c "print(round($c1 - $c0, 3))") s/s; lat and 64 KiB runs complete"
