#!/bin/bash
# Runs inside the rxe VM for scripts/measure-rxe.sh: perftest and tern-perf
# round trips on rxe0 in the same boot, their raw outputs written to $OUT
# (the guest has no python; the host script parses them).
set -euo pipefail
: "${OUT:?}" "${PERF:?}" "${ITERS:=5000}"
addr=169.254.77.1

perftest() {  # perftest NAME: server, then client; the client's table to $OUT/NAME.txt
  "$1" -R -n "$ITERS" -s 2 >/dev/null 2>&1 &
  local spid=$!
  sleep 1
  "$1" -R -n "$ITERS" -s 2 "$addr" >"$OUT/$1.txt" 2>&1
  wait "$spid"
}

tern() {  # tern NAME PORT [--rpc]: tern-perf echo latency to $OUT/NAME.json
  local name=$1 port=$2
  shift 2
  local dev="verbs:dev=rxe0,addr=$addr,port=$port"
  "$PERF" server --dev "$dev" "$@" --once --quiet &
  local spid=$! i
  # The server registers its arena before it listens (seconds under TCG).
  for i in $(seq 30); do
    rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*:$port " && break
    sleep 0.5
  done
  "$PERF" client --dev "$dev" "$@" --mode lat --size 32 --iters "$ITERS" --warmup 500 --timeout 20 \
    --json "$OUT/$name.json" --quiet >"$OUT/$name.txt"
  wait "$spid"
}

perftest ib_send_lat
perftest ib_write_lat
tern tern_send 20501
tern tern_rpc 20502 --rpc

