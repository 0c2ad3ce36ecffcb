#!/usr/bin/env bash
# Instructions pmd/shm's connection management spends on a device that
# holds N QPs, counted by callgrind (bench/shm_cm_cost.cc; the count does
# not move with the machine's load): per connect, per accept, per poll_cm
# with nothing pending, and per destroy of a QP whose event is queued among
# N others'. Each should not grow with N.
#   scripts/measure-cm-cost.sh [--against REV] [--qps "1 1024 10000"]
# --against REV builds REV's library in .measure-base/ (as measure-cost.sh
# does) and this tree's bench/shm_cm_cost.cc against it, beside this tree's.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
against="" qps="1 1024 10000"
while [[ $# -gt 0 ]]; do
  case $1 in
    --against) against=$2; shift 2 ;;
    --qps) qps=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "measure-cm-cost.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "measure-cm-cost.sh: needs valgrind" >&2; exit 1; }
tmp=$(mktemp -d /tmp/tern-cm-cost-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The bench against one tree's release library, at meson's release level.
build_bench() {  # tree, output
  "$top/scripts/build.sh" "$1/build-perf" -Dbuildtype=release -Dtests=false -- libtern.a
  g++ -std=c++20 -O3 -fno-exceptions -I"$1/lib" -I"$1/pmd" "$top/bench/shm_cm_cost.cc" -o "$2" \
    -Wl,--whole-archive "$1/build-perf/libtern.a" -Wl,--no-whole-archive -libverbs -lrdmacm -lmlx5 -lpthread
}
bins=(new:"$tmp/new")
build_bench "$top" "$tmp/new"
if [[ -n $against ]]; then
  base="$top/.measure-base"
  rev=$(git -C "$top" rev-parse --verify "$against^{commit}")
  if [[ -d $base ]]; then git -C "$base" checkout -q --detach "$rev"; else git -C "$top" worktree add -q --detach "$base" "$rev"; fi
  echo "base: $(git -C "$base" log --oneline -1)" >&2
  build_bench "$base" "$tmp/base"
  bins+=(base:"$tmp/base")
fi
# Fds: N idle QPs hold none; the connections made hold two each.
ulimit -n "$(ulimit -Hn)"
printf '%-6s %7s' build qps
for f in connect accept poll_cm destroy; do printf '%12s' "$f"; done
echo "   (instructions per call)"
for b in "${bins[@]}"; do
  for n in $qps; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" --collect-atstart=no \
      --toggle-collect='*cost_*' "${b#*:}" "$n" >"$tmp/out" 2>"$tmp/log"
    read -r _ _ _ reps _ polls _ destroys < "$tmp/out"
    callgrind_annotate --inclusive=yes --threshold=100 "$tmp/cg" >"$tmp/ann" 2>/dev/null
    printf '%-6s %7s' "${b%%:*}" "$n"
    for f in connect accept poll_cm destroy; do
      total=$(awk -v f="cost_$f" '$0 ~ f"\\(" { gsub(",", "", $1); print $1; exit }' "$tmp/ann")
      d=$reps
      [[ $f == poll_cm ]] && d=$polls
      [[ $f == destroy ]] && d=$destroys
      printf '%12s' "$((${total:-0} / d))"
    done
    echo
  done
done
