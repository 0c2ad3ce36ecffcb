#!/usr/bin/env bash
# Issue 22's isolation matrix: one tern-nfsd engine over pmd/shm exporting a
# directory on this machine's disk, a prober client doing GETATTR in a loop
# next to none, 1 and 4 writers of 64 KiB FILE_SYNC WRITEs and 4 writers of
# UNSTABLE WRITEs with a COMMIT every 16 -- the prober's calls/s and p99 and
# their ratio to its solo figures of the same run. Runs the matrix with the
# synchronous storage path (--storage sync: file I/O on the engine's thread,
# as tern-nfsd did before), with the asynchronous one but UNSTABLE WRITEs on
# the engine's thread (--unstable-inline: as before they went through the
# queue), and with the asynchronous one (auto: io_uring, else worker
# threads), --rounds times each, alternating.
# Goal: the asynchronous path keeps the prober at >= 0.8x its solo rate and
# <= 1.5x its solo p99 next to every writer load.
#
#   scripts/measure-nfs-isolation.sh [BUILDDIR] [--seconds S] [--rounds N] [--dir DIR]
#
# BUILDDIR (default build-perf) is configured release if new; only the
# measuring program is built. DIR (default: under /var/tmp) must be on the
# disk whose sync latency is to be measured (not a tmpfs). Needs root
# (open_by_handle_at). Take the machine's quiet lock first when others share
# it (docs/nfs-gateway.md).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf secs=4 rounds=1 dir=
while (($#)); do
  case $1 in
    --seconds) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-nfs-isolation: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [[ ! -f $build/build.ninja ]]; then
  meson setup "$build" -Dbuildtype=release -Dbenchmarks=false >/dev/null
fi
ninja -C "$build" tests/functional/tern-nfsd-isolation-measure >/dev/null
prog=$build/tests/functional/tern-nfsd-isolation-measure
extra=()
[[ -n $dir ]] && extra=(--dir "$dir")
echo "# $(date -u +%F) commit $(git rev-parse --short HEAD) $(uname -r) $(nproc) cores"
for ((r = 1; r <= rounds; r++)); do
  for mode in sync inline auto; do
    echo
    case $mode in
      inline) echo "## round $r, --storage auto --unstable-inline"
              "$prog" --seconds "$secs" --storage auto --unstable-inline "${extra[@]}" ;;
      *) echo "## round $r, --storage $mode"
         "$prog" --seconds "$secs" --storage "$mode" "${extra[@]}" ;;
    esac
  done
done
