#!/usr/bin/env bash
# Instructions per RPC, counted by callgrind: both engines and pmd/shm, for an
# inline 32-byte call and for 64 KiB through a write and a read chunk. The
# count does not move with the machine's load (unlike the wall-clock figures
# of measure-rpc.sh on this 2-core VM), so it is how revisions are compared
# for the engine's own cost.
#   scripts/measure-cost.sh [--against REV] [--sides]
# Each case runs tern-rpc-cost twice (2000 and 12000 calls after the same
# warm-up) and reports the difference / 10000. --against REV builds REV in
# .measure-base/ (as measure-rpc.sh does) and prints both and the ratio.
# --sides adds, for the inline call, each side on its own (callgrind
# collecting only inside tern-rpc-cost's client_call/client_poll or its
# server_poll, with its branch simulator): instructions, conditional
# branches, mispredictions, loads, stores and data cache misses (a 64-line
# D1: a proxy for the cache lines touched) per RPC, split into the
# engine's own, pmd/shm's and libc's, the costliest functions, and the
# instructions that cost many cycles for one count: clock reads, divisions,
# atomic read-modify-writes (scripts/cost_sides.py). A base is measured with this tree's
# bench/rpc_cost.cc built against it (its own may lack the side functions).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
against="" sides=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --against) against=$2; shift 2 ;;
    --sides) sides=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "measure-cost.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
"$top/scripts/setup.sh"
command -v valgrind >/dev/null || {
  echo "measure-cost.sh: installing valgrind" >&2
  if [[ $(id -u) -ne 0 ]]; then sudo apt-get install -y -qq valgrind >/dev/null; else apt-get install -y -qq valgrind >/dev/null; fi
}
"$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
bins=(new:"$top/build-perf/bench/tern-rpc-cost")
if [[ -n $against ]]; then
  base="$top/.measure-base"
  rev=$(git -C "$top" rev-parse --verify "$against^{commit}")
  if [[ -d $base ]]; then git -C "$base" checkout -q --detach "$rev"; else git -C "$top" worktree add -q --detach "$base" "$rev"; fi
  echo "base: $(git -C "$base" log --oneline -1)" >&2
  "$base/scripts/build.sh" "$base/build-perf" -Dbuildtype=release -Dtests=false
  # An older base may not have the tool (or, for --sides, its side
  # functions): build this tree's source against it, at meson's release
  # level (-O3: at -O2 the benchmark's own loop alone differed by ~125
  # instructions per RPC, which the table would have shown as the engine's).
  if [[ ! -x $base/build-perf/bench/tern-rpc-cost ]] || ((sides)); then
    g++ -std=c++20 -O3 -fno-exceptions -I"$base/lib" -I"$base/pmd" "$top/bench/rpc_cost.cc" \
      -o "$base/build-perf/tern-rpc-cost" -Wl,--whole-archive "$base/build-perf/libtern.a" -Wl,--no-whole-archive \
      -libverbs -lrdmacm -lmlx5 -lpthread
    bins+=(base:"$base/build-perf/tern-rpc-cost")
  else
    bins+=(base:"$base/build-perf/bench/tern-rpc-cost")
  fi
fi
tmp=$(mktemp -d /tmp/tern-cost-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# One callgrind run: out-file, then valgrind's and the program's arguments.
# The engine's clock is the TSC after a 10 ms calibration against
# CLOCK_MONOTONIC; on a loaded machine, valgrind's slowness can make that
# measurement implausible and the run falls back to clock_gettime for every
# reading (~40 instructions each, ~150 per RPC more), so a run whose count
# shows the fallback (now_ticks_slow called) is made again.
cg() {
  local out=$1 try
  shift
  for try in 1 2 3; do
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >/dev/null 2>"$tmp/log"
    grep -q now_ticks_slow "$out" || return 0
    echo "measure-cost.sh: a run fell back from the TSC (loaded machine?); again" >&2
  done
}
count() {  # binary, calls, bulk, dir -> instructions
  cg "$tmp/cg" "$1" "$2" "$3" "$4"
  sed -n 's/.*Collected : *//p' "$tmp/log"
}
printf '%-18s' case
for b in "${bins[@]}"; do printf '%14s' "${b%%:*}"; done
[[ ${#bins[@]} -gt 1 ]] && printf '%8s' ratio
echo "   (instructions per RPC, client + server + pmd/shm)"
for c in "inline 0 w" "write_64K 65536 w" "read_64K 65536 r"; do
  read -r name bulk dir <<<"$c"
  printf '%-18s' "$name"
  per=()
  for b in "${bins[@]}"; do
    bin=${b#*:}
    i1=$(count "$bin" 2000 "$bulk" "$dir")
    i2=$(count "$bin" 12000 "$bulk" "$dir")
    v=$(((i2 - i1) / 10000))
    per+=("$v")
    printf '%14s' "$v"
  done
  [[ ${#per[@]} -gt 1 ]] && awk -v a="${per[0]}" -v b="${per[1]}" 'BEGIN { printf "%8.3f", a / b }'
  echo
done
((sides)) || exit 0
# A small data cache (64 lines, fully associative) rather than the host's:
# its misses per RPC stand for the cache lines each part touches (with
# 32 KiB nothing misses in steady state, and both engines share the thread).
csim=(--cache-sim=yes --D1=4096,64,64 --I1=32768,8,64 --LL=8388608,16,64)
sides_of() {  # binary, label
  local n
  for n in 2000 12000; do
    cg "$tmp/cli.$n" --branch-sim=yes "${csim[@]}" --dump-instr=yes --collect-atstart=no \
      --toggle-collect='*client_call*' --toggle-collect='*client_poll*' "$1" $n 0 w
    cg "$tmp/srv.$n" --branch-sim=yes "${csim[@]}" --dump-instr=yes --collect-atstart=no \
      --toggle-collect='*server_poll*' "$1" $n 0 w
  done
  echo
  echo "$2, inline 32-byte call, the client's side (call + its poll), per RPC:"
  python3 "$top/scripts/cost_sides.py" "$tmp/cli.2000" "$tmp/cli.12000" 10000 12 "$1"
  echo "$2, the server's side (its poll: receive, handler, reply), per RPC:"
  python3 "$top/scripts/cost_sides.py" "$tmp/srv.2000" "$tmp/srv.12000" 10000 12 "$1"
}
for b in "${bins[@]}"; do sides_of "${b#*:}" "${b%%:*}"; done
