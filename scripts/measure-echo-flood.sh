#!/usr/bin/env bash
# docs/performance.md "Echo p99 under the cache flood, repeated": the good
# client's echo p99 with another peer flooding the duplicate request cache,
# as many short alternating solo / flood phases in one run
# (tern-isolation-measure --alternate), so that the flood/solo ratio is a
# median over pairs rather than one pair's, and the run repeated to show
# whether that median repeats. Prints each run's ratio lines, the server's
# passes, where the slow echoes' time went, and the median ratio per run.
#   scripts/measure-echo-flood.sh [--runs 3] [--pairs 20] [--phase-seconds 0.2] [--echo-only] [OUTDIR]
# Builds build-perf/ in release first. Run it on an otherwise idle machine
# (load average < 3); say "loaded" for anything taken otherwise.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
runs=3 pairs=20 secs=0.2 extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --phase-seconds) secs=$2; shift 2 ;;
    --echo-only) extra+=(--echo-only 1); shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "measure-echo-flood.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-$(mktemp -d /tmp/tern-echo-flood-XXXXXX)}
mkdir -p "$out"
"$top/scripts/setup.sh"
[[ -f "$top/build-perf/build.ninja" ]] || meson setup "$top/build-perf" -Dbuildtype=release >/dev/null
meson configure "$top/build-perf" -Dbuildtype=release -Dtests=true >/dev/null
ninja -j2 -C "$top/build-perf" tests/functional/tern-isolation-measure >/dev/null
echo "commit $(git -C "$top" rev-parse --short HEAD); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
I="$top/build-perf/tests/functional/tern-isolation-measure"
rc=0
for r in $(seq 1 "$runs"); do
  echo "== run $r ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
  "$I" --alternate "$pairs" --phase-seconds "$secs" "${extra[@]+"${extra[@]}"}" \
    --json "$out/echo-flood-$r.json" >"$out/echo-flood-$r.txt" 2>&1 || rc=1
  grep -vE '^(pair |solo  +(GET|echo order|echo time))' "$out/echo-flood-$r.txt" || true
done
echo "== median echo p99 flood/solo per run:" \
  "$(grep -ho '"echo_p99_x_median":[0-9.]*' "$out"/echo-flood-*.json | cut -d: -f2 | tr '\n' ' ')"
echo "per-pair lines in $out/echo-flood-*.txt"
exit $rc
