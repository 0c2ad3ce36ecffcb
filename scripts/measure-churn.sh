#!/usr/bin/env bash
# Connection churn against one server engine (issue 21; docs/security.md,
# "Connections"): tern-churn (apps/tern_churn.cc) forks a server over
# pmd/shm with default options, one well-behaved client calling all along
# (every reply checked), and churn clients that connect, call once on each
# connection and are killed with SIGKILL, at RATE connections a second for
# SECONDS. Afterwards the server, holding no connection, reports its
# engine's accounting (all 0 at idle), and its RSS before, after the first
# tenth, at its peak and at the end. Fails if anything is left or a
# well-behaved call failed. Not in CI: it takes minutes.
#   scripts/measure-churn.sh [--seconds S] [--rate R] [--build DIR] [-- tern-churn options]
# --build: an existing build directory to use (default: build-perf/, made in
# release first). tern-churn options: --per-client N (10), --life-ms MS
# (300), --max-connections N, --idle-reap-ms MS, --max-per-peer N.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
seconds=60 rate=100 build=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "measure-churn.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
if [[ -z $build ]]; then
  "$top/scripts/setup.sh"
  "$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
  build="$top/build-perf"
fi
# The server logs every connection's coming and going at info: thousands.
export TERN_LOG_LEVEL=${TERN_LOG_LEVEL:-warn}
echo "commit $(git -C "$top" rev-parse --short HEAD); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$build/apps/tern-churn" --seconds "$seconds" --rate "$rate" "$@"
