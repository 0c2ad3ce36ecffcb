#!/usr/bin/env bash
# Reproduces docs/performance.md's "RPC engine over pmd/shm" figures: raw SEND
# echo and RPC calls (inline, and 4 KiB / 64 KiB / 1 MiB through read and
# write chunks), one fresh tern-perf server per client run, server on CPU 1,
# client on CPU 0. Results: one JSON and one table per run in the output dir.
# Run it on an otherwise idle machine; it takes about a minute.
#   scripts/measure-rpc.sh [OUTDIR]      (builds build-perf/ in release first)
#
# Same-run comparison with another revision (before/after a change):
#   scripts/measure-rpc.sh --against REV [--rounds N] [OUTDIR]
# builds REV in a worktree (.measure-base/, build-perf there), then runs a
# short set of cases alternating base and this tree N times (default 5) and
# prints each side's median p50 / p99.9 latency and rate, the best p50, and
# the ratio this/base. Both binaries run on the same machine minutes apart, so the
# ratio is the figure; absolute numbers drift between runs on this VM.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
against="" rounds=5
while [[ $# -gt 0 ]]; do
  case $1 in
    --against) against=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "measure-rpc.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-$(mktemp -d /tmp/tern-measure-XXXXXX)}
mkdir -p "$out"
"$top/scripts/setup.sh"
"$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
P="$top/build-perf/apps/tern-perf"
S=$(mktemp -u /tmp/tern-measure-XXXXXX.sock)
trap 'rm -f "$S"' EXIT

run() {  # name, server args, client args
  local name=$1 sargs=$2 cargs=$3 sp
  rm -f "$S"
  # shellcheck disable=SC2086
  "$P" server $sargs --dev "shm:path=$S" --lcore 1 --once --quiet &
  sp=$!
  for _ in $(seq 100); do [[ -S $S ]] && break; sleep 0.02; done
  # shellcheck disable=SC2086
  "$P" client $cargs --dev "shm:path=$S" --lcore 0 --quiet --json "$out/$name.json" >"$out/$name.txt" 2>&1
  wait "$sp" 2>/dev/null || true
  echo "$name: $(head -3 "$out/$name.txt" | tail -2 | tr -s ' ' | tr '\n' ' ')" >&2
  sleep 1
}

if [[ -n $against ]]; then
  base="$top/.measure-base"
  rev=$(git -C "$top" rev-parse --verify "$against^{commit}")
  if [[ -d $base ]]; then
    git -C "$base" checkout -q --detach "$rev"
  else
    git -C "$top" worktree add -q --detach "$base" "$rev"
  fi
  echo "base: $(git -C "$base" log --oneline -1)" >&2
  "$base/scripts/build.sh" "$base/build-perf" -Dbuildtype=release -Dtests=false
  NEW=$P
  OLD="$base/build-perf/apps/tern-perf"
  cases=(
    "rpc_lat|--rpc|--rpc --mode lat --size 32 --seconds 2"
    "rpc_bw|--rpc|--rpc --mode bw --qd 32 --size 32 --seconds 2"
    "rpc_lat_64K_read|--rpc|--rpc --mode lat --bulk 64K --bulk-dir read --seconds 2 --warmup 1000"
    "rpc_bw_64K_write|--rpc|--rpc --mode bw --qd 8 --bulk 64K --bulk-dir write --seconds 2 --warmup 1000"
  )
  for ((r = 1; r <= rounds; ++r)); do
    for c in "${cases[@]}"; do
      IFS='|' read -r name sargs cargs <<<"$c"
      # Alternate which side goes first, so a drift in the machine's load
      # does not always favour one.
      if ((r % 2)); then order=(base new); else order=(new base); fi
      for side in "${order[@]}"; do
        if [[ $side == base ]]; then P=$OLD; else P=$NEW; fi
        run "${name}.${side}.${r}" "$sargs" "$cargs"
      done
    done
  done
  python3 - "$out" "$rounds" "${cases[@]}" <<'PY'
import json, statistics, sys
out, rounds, cases = sys.argv[1], int(sys.argv[2]), [c.split('|')[0] for c in sys.argv[3:]]
def vals(name, side, get):
    v = []
    for r in range(1, rounds + 1):
        try:
            v.append(get(json.load(open(f"{out}/{name}.{side}.{r}.json"))))
        except Exception:
            pass
    return v
def med(name, side, get):
    v = vals(name, side, get)
    return statistics.median(v) if v else float('nan')
p50_of = lambda j: j['latency_ns']['p50']
print(f"{'case':20} {'p50 ns base':>12} {'new':>8} {'ratio':>6}  {'best p50 base':>13} {'new':>6} {'ratio':>6}  "
      f"{'p99.9 base':>10} {'new':>8}  {'rate/s base':>12} {'new':>10} {'ratio':>6}")
for n in cases:
    p50 = [med(n, s, p50_of) for s in ('base', 'new')]
    best = [min(vals(n, s, p50_of) or [float('nan')]) for s in ('base', 'new')]
    p999 = [med(n, s, lambda j: j['latency_ns']['p99_9']) for s in ('base', 'new')]
    rate = [med(n, s, lambda j: j['requests_per_s']) for s in ('base', 'new')]
    print(f"{n:20} {p50[0]:12.0f} {p50[1]:8.0f} {p50[1]/p50[0]:6.3f}  {best[0]:13.0f} {best[1]:6.0f} {best[1]/best[0]:6.3f}  "
          f"{p999[0]:10.0f} {p999[1]:8.0f}  {rate[0]:12.0f} {rate[1]:10.0f} {rate[1]/rate[0]:6.3f}")
print(f"(medians of {rounds} alternating runs each, and the best p50 of them; ratio = new / base)")
PY
  echo "results in $out" >&2
  exit 0
fi
run send_lat "" "--mode lat --size 32 --seconds 3"
run rpc_lat "--rpc" "--rpc --mode lat --size 32 --seconds 3"
run send_bw "" "--mode bw --qd 32 --size 32 --seconds 3"
run rpc_bw "--rpc" "--rpc --mode bw --qd 32 --size 32 --seconds 3"
for B in 4K 64K 1M; do
  for D in read write; do
    W=1000
    [[ $B == 1M ]] && W=200
    run "rpc_lat_${B}_$D" "--rpc" "--rpc --mode lat --bulk $B --bulk-dir $D --seconds 2 --warmup $W"
    run "rpc_bw_${B}_$D" "--rpc" "--rpc --mode bw --qd 8 --bulk $B --bulk-dir $D --seconds 2 --warmup $W"
  done
done
run send_lat2 "" "--mode lat --size 32 --seconds 3"
run rpc_lat2 "--rpc" "--rpc --mode lat --size 32 --seconds 3"
echo "results in $out" >&2
