#!/usr/bin/env bash
# Cached 4 KiB random reads through the kernel's NFS/RDMA client, this
# tree's tern-nfsd against another revision's, in one boot of the Soft-RoCE
# VM (tests/vm/nfs-cached-read.sh): fio randread, 4 KiB, O_DIRECT at the
# client, depth 16, on a 64 MiB file the server's page cache holds, exported
# from ext4 (a RAM disk) and from tmpfs; one engine each, the same options;
# --rounds rounds of --seconds, alternating which goes first. Prints the
# median IOPS of each and their ratio (this tree / REV), and the servers'
# READ counters (read_nowait: served at once from the page cache).
# Issue 22: within 5% of the server before its storage path went off the
# engine's thread (64a74d6^, the default REV). TCG emulation: the ratio in
# one boot is the figure, not the absolute numbers.
#
#   scripts/measure-nfs-cached-read.sh [--against REV] [--seconds S] [--rounds N]
#
# REV is built in .measure-nfs-base/ (as measure-nfs-read-cost.sh does);
# this tree's tern-nfsd in build-perf. Take the VM's lock first when others
# share the machine (flock /work/wt/vm.lock ...).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
against=64a74d6^ secs=5 rounds=3
while (($#)); do
  case $1 in
    --against) against=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "measure-nfs-cached-read: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
scripts/build.sh build-perf -Dbuildtype=release -Dtests=false
base="$top/.measure-nfs-base"
rev=$(git rev-parse --verify "$against^{commit}")
# Shared with measure-nfs-read-cost.sh (run them one at a time): checked out
# only when at another revision, so that the tool it added stays.
if [[ ! -d $base ]]; then git worktree add -q --detach "$base" "$rev"
elif [[ $(git -C "$base" rev-parse HEAD) != "$rev" ]]; then git -C "$base" checkout -q -f --detach "$rev"; fi
echo "base: $(git -C "$base" log --oneline -1)" >&2
"$base/scripts/build.sh" "$base/build-perf" -Dbuildtype=release -Dtests=false
out=$(mktemp -d "$top/.measure-nfs.XXXXXX")
trap 'rm -rf "$out"' EXIT
scripts/rxe-vm/rxe-vm run --timeout 1200 -e OUT="$out" -e NFSD_A="$top/build-perf/apps/tern-nfsd" \
  -e NFSD_B="$base/build-perf/apps/tern-nfsd" -e SECS="$secs" -e ROUNDS="$rounds" -- tests/vm/nfs-cached-read.sh
python3 - "$out" "$rounds" "$secs" "$(git log --oneline -1 | cut -c1-7)" "$(git -C "$base" log --oneline -1 | cut -c1-7)" <<'PY'
import json, os, re, statistics, sys
out, rounds, secs, a_rev, b_rev = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
print(f"fio randread 4 KiB, depth 16, O_DIRECT at the client, cached 64 MiB file, {rounds} rounds of {secs} s "
      f"(tern-nfsd, 1 engine: A = {a_rev}, B = {b_rev})")
print()
print("| export | A IOPS (median) | B IOPS (median) | A / B | A rounds | B rounds |")
print("| --- | ---: | ---: | ---: | --- | --- |")
for fs in ("ext4", "tmpfs"):
    v = {}
    for s in "AB":
        v[s] = [json.load(open(os.path.join(out, f"{fs}-{s}-{r}.json")))["jobs"][0]["read"]["iops"]
                for r in range(1, rounds + 1)]
    a, b = statistics.median(v["A"]), statistics.median(v["B"])
    print(f"| {fs} | {a:.0f} | {b:.0f} | {a / b:.3f} | {' '.join(f'{x:.0f}' for x in v['A'])} "
          f"| {' '.join(f'{x:.0f}' for x in v['B'])} |")
print()
print("A's READ counters, last round (read_nowait: at once from the page cache; storage_*: through the queue):")
for fs in ("ext4", "tmpfs"):
    log = open(os.path.join(out, f"{fs}-A-{rounds}.log")).read()
    stats = [l for l in log.splitlines() if "stats:" in l]
    if stats:
        keep = [kv for kv in stats[-1].split() if re.match(r"(calls|read|storage|nowait|deferred)", kv)]
        print(f"    {fs}: {' '.join(keep)}")
PY
