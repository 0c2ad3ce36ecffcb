#!/usr/bin/env bash
# Tern next to UCX, read state by state. This VM's cross-core cache-line
# round trip sits in one of (so far) three states -- ~50, ~110 and ~490 ns,
# the vCPUs' placement on the host -- and flips within a run; every latency
# here moves with it, so a median of per-case ratios (compare-ucx.sh) mixes
# the states and can flatter. So this script runs many SHORT rounds, each
# interleaving
#   - UCX: uct posix am_lat, ucp_am_lat, ucp_am_bw (UCX_TLS=posix,self),
#   - tern-perf over pmd/shm: raw SEND round trip, RPC round trip (depth 1),
#     RPC rate at depth 32,
#   - tern-noise (how often and how long a CPU is taken away),
# with the cache-line round trip (bench/tern-cacheline) measured before and
# after every case; the order of the cases rotates from round to round.
# scripts/ucx_modes.py then cuts the run's cache-line samples into states
# (the least-variance split of their logarithms into up to three classes
# whose medians are >= 1.5x apart: no fixed cut-off; it prints the
# thresholds), files a case under a state only when the cache line on both
# sides of it was in that state ("mixed" otherwise: counted, in no state's
# figures, listed by change), and prints per state each program's median
# and best, how many of its runs fell there, the issue's ratios median-vs-
# median and best-vs-best (RPC p50 <= 1.25x ucp_am_lat, raw SEND <= 1.0x
# uct am_lat, RPC depth-32 rate >= 0.6x ucp_am_bw one-way messages), and
# the RPC's and raw SEND's p99.9 in units of the state's stall floor.
# Installs ucx-utils (Debian) if missing. ~10 s a round with --seconds 0.5.
#   scripts/compare-ucx-modes.sh [--rounds N] [--seconds S] [--json FILE] [--raw DIR]
#   scripts/compare-ucx-modes.sh --self-test   (the classifier on recorded runs; no measuring)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
rounds=12 seconds=0.5 json_out="" out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --raw) out=$2; shift 2 ;;
    --self-test) exec python3 "$top/scripts/ucx_modes.py" --self-test "$top"/tests/data/ucx-modes/*.json ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "compare-ucx-modes.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
me=compare-ucx-modes.sh
# shellcheck source=scripts/ucx-common.sh
source "$top/scripts/ucx-common.sh"
ucx_prepare
[[ -n $out ]] || out=$(mktemp -d /tmp/tern-ucx-modes-XXXXXX)
mkdir -p "$out"
S=$(mktemp -u /tmp/tern-ucx-XXXXXX.sock)
port=$((15000 + RANDOM % 2000))
trap 'rm -f "$S"' EXIT
# ucx_perftest counts iterations, not time: ~2 M one-way messages/s at most.
iters=$(awk -v s="$seconds" 'BEGIN { printf "%d", s * 1000000 }')

run_case() {
  case $1 in
    uct_am_lat) ucx uct_am_lat am_lat -x posix -d memory ;;
    ucp_am_lat) ucx ucp_am_lat ucp_am_lat UCX_TLS=posix,self ;;
    ucp_am_bw) ucx ucp_am_bw ucp_am_bw UCX_TLS=posix,self ;;
    send_lat) tern send_lat "" "--mode lat --size 32" ;;
    rpc_lat) tern rpc_lat "--rpc" "--rpc --mode lat --size 32" ;;
    rpc_bw) tern rpc_bw "--rpc" "--rpc --mode bw --qd 32 --size 32" ;;
    noise) "$NOISE" --seconds "$seconds" --json >"$out/noise.$r.json" || true ;;
  esac
}

cases=(uct_am_lat send_lat ucp_am_lat rpc_lat ucp_am_bw rpc_bw noise)
n=${#cases[@]}
# One cache-line measurement between every two cases: the one after a case
# is the one before the next. 300 samples of 200 round trips: ~20-60 ms.
cl() { "$CL" --json --samples 300 >"$out/cl.$r.$1.json"; }
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds" >&2
  k=0
  cl 0
  for ((i = 0; i < n; ++i)); do
    c=${cases[$(((i + r - 1) % n))]}  # rotate, so no case always follows the same one
    echo "$k $c" >>"$out/order.$r"
    run_case "$c"
    k=$((k + 1))
    cl "$k"
  done
done
python3 "$top/scripts/ucx_modes.py" "$out" ${json_out:+--json "$json_out"}
echo "raw results in $out" >&2
