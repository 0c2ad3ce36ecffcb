#!/bin/bash
# Runs inside the rxe VM for scripts/measure-rxe.sh: perftest and tern-perf
# round trips on rxe0 in the same boot, their raw outputs written to $OUT
# (the guest has no python; the host script parses them).
#
#   OUT      where the outputs go (a directory shared with the host)
#   PERF     tern-perf to measure; PERF_OLD another one (--against), optional
#   ITERS    measured round trips per run (default 5000; 500 of warm-up first)
#   ROUNDS   how many times every case runs (default 1), the order of the
#            tern-perf binaries alternating from round to round
#   SHM      1: also tern-perf over pmd/shm in the VM (no rxe: what the
#            engine itself costs there, emulated alike), as tern_shm_send/rpc
#            (this tree's binary only: the engine is the same in both)
#   DEVARGS  device-spec additions, e.g. "inline=0": each is one more variant
#            of this tree's binary, named new+ADDITION (verbs:...,ADDITION)
#   CLOCKS   TERN_CLOCK values to run tern-perf with, e.g. "auto tsc"
#            (default "auto": the guest's choice); each is a variant
#   SYSCALLS 1: afterwards, count system calls per round trip (below)
#   COUNTERS 1: afterwards, both engines' counters (driver's included) after
#            RPCs of three kinds: inline 32 B, 64 KiB read chunk, 64 KiB
#            write chunk ($OUT/counters.KIND.{client,server}.txt)
set -euo pipefail
: "${OUT:?}" "${PERF:?}" "${ITERS:=5000}" "${ROUNDS:=1}" "${SYSCALLS:=0}" "${COUNTERS:=0}" "${PERF_OLD:=}"
: "${CLOCKS:=auto}" "${SHM:=0}" "${DEVARGS:=}"
addr=169.254.77.1
port=20500
clk=auto     # TERN_CLOCK for tern(): auto (unset) or a value
devkind=verbs  # tern() over rxe0, or shm
devextra=      # appended to tern()'s verbs spec

perftest() {  # perftest NAME SIZE TAG: server, then client; the client's table to $OUT/NAME_sSIZE.TAG.txt
  local name=$1 size=$2 tag=$3
  "$name" -R -n "$ITERS" -s "$size" >/dev/null 2>&1 &
  local spid=$!
  sleep 1
  "$name" -R -n "$ITERS" -s "$size" "$addr" >"$OUT/${name}_s$size.$tag.txt" 2>&1
  wait "$spid"
}

tern() {  # tern BINARY NAME [--rpc [CLIENT ARGS]]: tern-perf echo latency to $OUT/NAME.json (and .txt)
  local bin=$1 name=$2
  shift 2
  port=$((port + 1))
  local dev="verbs:dev=rxe0,addr=$addr,port=$port$devextra"
  [[ $devkind == shm ]] && dev="shm:path=/run/tern-measure-$port.sock"
  local envc=(env -u TERN_CLOCK)
  [[ $clk != auto ]] && envc=(env TERN_CLOCK="$clk")
  local sargs=()
  [[ " $* " == *" --rpc "* ]] && sargs=(--rpc --engine-stats)
  "${envc[@]}" "$bin" server --dev "$dev" "${sargs[@]}" --once --quiet 2>"$OUT/$name.server.txt" &
  local spid=$! i
  # The server registers its arena before it listens (seconds under TCG).
  for i in $(seq 30); do
    if [[ $devkind == shm ]]; then [[ -S /run/tern-measure-$port.sock ]] && break
    else rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*:$port " && break; fi
    sleep 0.5
  done
  local stats=()
  [[ " $* " == *" --rpc "* ]] && stats=(--engine-stats)
  "${envc[@]}" "$bin" client --dev "$dev" --mode lat --size 32 "$@" "${stats[@]}" --iters "$ITERS" --warmup 500 --timeout 20 \
    --json "$OUT/$name.json" --quiet >"$OUT/$name.txt" 2>"$OUT/$name.err"
  wait "$spid"
}

# Variants: this tree's binary ("new") and --against's ("old"), each with
# every clock of CLOCKS; named SIDE, or SIDE-CLOCK when there are several.
sides=(new)
[[ -n $PERF_OLD ]] && sides=(new old)
for a in $DEVARGS; do sides+=("new+$a"); done
read -r -a clocks <<<"$CLOCKS"
variants=()
for side in "${sides[@]}"; do
  for c in "${clocks[@]}"; do variants+=("$side:$c"); done
done
vname() {  # vname SIDE:CLOCK
  if ((${#clocks[@]} > 1)); then echo "${1%%:*}-${1#*:}"; else echo "${1%%:*}"; fi
}
vrun() {  # vrun SIDE:CLOCK NAME [ARGS]: tern with that binary and clock
  local v=$1 name=$2
  shift 2
  local bin=$PERF side=${v%%:*}
  [[ $side == old ]] && bin=$PERF_OLD
  [[ $side == new+* ]] && devextra=",${side#new+}"
  clk=${v#*:}
  tern "$bin" "$name" "$@"
  clk=auto devextra=
}
for ((r = 1; r <= ROUNDS; ++r)); do
  echo "measure-in-vm: round $r of $ROUNDS"
  perftest ib_send_lat 2 "$r"
  perftest ib_send_lat 32 "$r"
  # An RPC's call is 100 bytes on the wire and its reply 84 (the RPC and
  # RPC-over-RDMA headers around the 32 bytes of arguments): perftest with
  # the same bytes says what the size alone costs on rxe.
  perftest ib_send_lat 100 "$r"
  perftest ib_write_lat 32 "$r"
  # Alternate the order of the variants, so that a drift favours none.
  order=("${variants[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#variants[@]} - 1; i >= 0; --i)); do order+=("${variants[i]}"); done
  fi
  for v in "${order[@]}"; do
    vrun "$v" "tern_send.$(vname "$v").$r"
    vrun "$v" "tern_rpc.$(vname "$v").$r" --rpc
    if ((SHM)) && [[ ${v%%:*} == new ]]; then
      devkind=shm
      vrun "$v" "tern_shm_send.$(vname "$v").$r"
      vrun "$v" "tern_shm_rpc.$(vname "$v").$r" --rpc
      devkind=verbs
    fi
  done
done

if ((COUNTERS)); then
  # Per RPC: the counters over a run divided by its calls (warm-up
  # included, connection set-up too: a handful of WRs in thousands).
  full=$ITERS ITERS=1000
  vrun "${variants[0]}" counters.inline --rpc
  vrun "${variants[0]}" counters.read64k --rpc --bulk 64K --bulk-dir read
  vrun "${variants[0]}" counters.write64k --rpc --bulk 64K --bulk-dir write
  ITERS=$full
fi

# System calls per round trip: the kernel's syscall tracepoint counted per
# process and system call (a tracefs histogram), over a run of N and a run of
# 3N round trips; the difference over 2N is what one round trip costs, both
# sides together, without the set-up's calls. Tracing slows the runs: these
# runs give counts, not times.
if ((SYSCALLS)); then
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
  ev=/sys/kernel/tracing/events/raw_syscalls/sys_enter
  hist='hist:keys=common_pid.execname,id.syscall:vals=hitcount:size=4096'
  counted() {  # counted TAG COMMAND...: runs the command with the histogram on, to $OUT/TAG.hist
    local tag=$1
    shift
    echo "$hist" >"$ev/trigger"
    "$@"
    cat "$ev/hist" >"$OUT/$tag.hist"
    echo "!$hist" >"$ev/trigger"
  }
  full=$ITERS
  for n in $((full / 4)) $((3 * full / 4)); do
    ITERS=$n
    counted "sys.ib_send_lat.$n" perftest ib_send_lat 32 "sys$n"
    for v in "${variants[@]}"; do
      counted "sys.tern_send.$(vname "$v").$n" vrun "$v" "sys_send.$(vname "$v").$n"
      counted "sys.tern_rpc.$(vname "$v").$n" vrun "$v" "sys_rpc.$(vname "$v").$n" --rpc
    done
  done
  ITERS=$full
fi
