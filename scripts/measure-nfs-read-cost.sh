#!/usr/bin/env bash
# Instructions per NFSv3 READ of data already in the page cache, counted by
# callgrind: tern-nfsd's server (lib/nfsd) and a client engine over pmd/shm,
# both polled from one thread (bench/nfs_read_cost.cc), for 4 KiB and
# 64 KiB READs through a write chunk. The count does not move with the
# machine's load, so it is how revisions are compared for what a cached
# READ costs (issue 22: within 10% of the server before its storage path
# went off the engine's thread, 64a74d6^).
#   scripts/measure-nfs-read-cost.sh [--against REV] [--dir DIR]
# Each case runs tern-nfs-read-cost twice (2000 and 12000 READs after the
# same 1,000-READ warm-up) and reports the difference / 10000. --against REV
# builds REV in .measure-nfs-base/ and prints both and the ratio (this
# tree / REV); a REV without the tool gets this tree's source and meson
# target (it builds unchanged back to 64a74d6^). --dir: where the exported
# file is made (default /var/tmp: a disk file system). Needs root, as tern-nfsd does.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
against=""
dir=/var/tmp
while [[ $# -gt 0 ]]; do
  case $1 in
    --against) against=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "measure-nfs-read-cost.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "measure-nfs-read-cost.sh: needs root (open_by_handle_at), as tern-nfsd does" >&2; exit 2; }
"$top/scripts/setup.sh"
command -v valgrind >/dev/null || {
  echo "measure-nfs-read-cost.sh: installing valgrind" >&2
  apt-get install -y -qq valgrind >/dev/null
}
"$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
bins=(new:"$top/build-perf/bench/tern-nfs-read-cost")
if [[ -n $against ]]; then
  base="$top/.measure-nfs-base"
  rev=$(git -C "$top" rev-parse --verify "$against^{commit}")
  # Checked out only when at another revision: a forced checkout drops the
  # tool this script (or measure-nfs-cached-read.sh) added to the base.
  if [[ ! -d $base ]]; then git -C "$top" worktree add -q --detach "$base" "$rev"
  elif [[ $(git -C "$base" rev-parse HEAD) != "$rev" ]]; then git -C "$base" checkout -q -f --detach "$rev"; fi
  echo "base: $(git -C "$base" log --oneline -1)" >&2
  # A base without the tool gets this tree's source and its meson target,
  # so that both are compiled alike (same flags, same link); the base's
  # worktree is a scratch copy, left with them.
  cmp -s "$top/bench/nfs_read_cost.cc" "$base/bench/nfs_read_cost.cc" ||
    cp "$top/bench/nfs_read_cost.cc" "$base/bench/nfs_read_cost.cc"
  grep -q "'tern-nfs-read-cost'" "$base/bench/meson.build" ||
    echo "executable('tern-nfs-read-cost', 'nfs_read_cost.cc', dependencies: [tern_nfsd_dep])" >>"$base/bench/meson.build"
  "$base/scripts/build.sh" "$base/build-perf" -Dbuildtype=release -Dtests=false
  bins+=(base:"$base/build-perf/bench/tern-nfs-read-cost")
fi
tmp=$(mktemp -d /tmp/tern-nfs-read-cost-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
count() {  # binary, reads, size -> instructions
  if ! valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$1" "$2" "$3" chunk "$dir" >/dev/null 2>"$tmp/log"; then
    cat "$tmp/log" >&2
    return 1
  fi
  grep -q ", 0 through the storage queue\|no storage queue" "$tmp/log" || queued=1
  sed -n 's/.*Collected : *//p' "$tmp/log"
}
queued=0
printf '%-18s' case
for b in "${bins[@]}"; do printf '%14s' "${b%%:*}"; done
[[ ${#bins[@]} -gt 1 ]] && printf '%8s' ratio
echo "   (instructions per cached NFS READ, client + server + pmd/shm)"
for c in "read_4K 4096" "read_64K 65536"; do
  read -r name size <<<"$c"
  printf '%-18s' "$name"
  per=()
  for b in "${bins[@]}"; do
    bin=${b#*:}
    count "$bin" 2000 "$size" >"$tmp/i1"
    count "$bin" 12000 "$size" >"$tmp/i2"
    i1=$(<"$tmp/i1") i2=$(<"$tmp/i2")
    v=$(((i2 - i1) / 10000))
    per+=("$v")
    printf '%14s' "$v"
  done
  [[ ${#per[@]} -gt 1 ]] && awk -v a="${per[0]}" -v b="${per[1]}" 'BEGIN { printf "%8.3f", a / b }'
  echo
done
if ((queued)); then
  echo "Some READs went through the storage queue (the export's file system refuses RWF_NOWAIT: tmpfs does):"
  echo "their counts include this thread's polling while the kernel's worker ran them, and move from run to run."
fi
