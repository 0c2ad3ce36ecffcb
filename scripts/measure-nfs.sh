#!/usr/bin/env bash
# tern-nfsd next to the Linux kernel's NFS server (nfsd + svcrdma), in one
# boot of the Soft-RoCE VM: the same fio jobs through the kernel's NFS/RDMA
# client (NFSv3, proto=rdma, the same mount options) against each server
# exporting a tmpfs -- random 4 KiB reads and writes at depth 16, sequential
# 1 MiB reads and writes at depth 4, O_DIRECT, each for --seconds, --rounds
# times, alternating which server goes first. Prints the median IOPS and
# MB/s of each and their ratio (tern-nfsd / nfsd); --json FILE writes them.
# TCG emulation: the ratio is the figure, not the absolute numbers.
#
#   scripts/measure-nfs.sh [BUILDDIR] [--seconds S] [--rounds N] [--engines N] [--json FILE]
#
# BUILDDIR (default build-perf, release with apps) must hold apps/tern-nfsd;
# the script builds it if missing. Take the machine's quiet lock first when
# others share it (docs/nfs-gateway.md).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf secs=5 rounds=3 engines=2 json=
while (($#)); do
  case $1 in
    --seconds) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --engines) engines=$2; shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-nfs: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [[ ! -x $build/apps/tern-nfsd ]]; then
  scripts/build.sh "$build" -Dbuildtype=release -Dapps=true >/dev/null
fi
out=$(mktemp -d "$top/.measure-nfs.XXXXXX")
trap 'rm -rf "$out"' EXIT
scripts/rxe-vm/rxe-vm run --timeout 1800 -e OUT="$out" -e NFSD="$build/apps/tern-nfsd" -e SECS="$secs" \
  -e ROUNDS="$rounds" -e ENGINES="$engines" -- tests/vm/nfs-compare.sh
python3 - "$out" "$rounds" "$json" "$secs" "$engines" <<'PY'
import glob, json, os, statistics, sys
out, rounds, jpath, secs, engines = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
jobs = [("randread4k", "read", "random 4 KiB reads, depth 16"), ("randwrite4k", "write", "random 4 KiB writes, depth 16"),
        ("seqread1m", "read", "sequential 1 MiB reads, depth 4"), ("seqwrite1m", "write", "sequential 1 MiB writes, depth 4")]
res = {}
for name, side, _ in jobs:
    for srv in ("kernel", "tern"):
        iops, mbs = [], []
        for r in range(1, rounds + 1):
            with open(os.path.join(out, f"{srv}-{name}-{r}.json")) as f:
                j = json.load(f)["jobs"][0][side]
            iops.append(j["iops"])
            mbs.append(j["bw_bytes"] / 1e6)
        res[(name, srv)] = (statistics.median(iops), statistics.median(mbs), iops)
print(f"fio through the kernel's NFSv3/RDMA client, {rounds} rounds of {secs} s, medians "
      f"(tern-nfsd: {engines} engines, wait mode; nfsd: 4 threads)")
print()
print("| job | nfsd IOPS | tern-nfsd IOPS | nfsd MB/s | tern-nfsd MB/s | tern-nfsd / nfsd |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
doc = {"rounds": rounds, "seconds": int(secs), "engines": int(engines), "jobs": {}}
for name, side, what in jobs:
    ki, km, kall = res[(name, "kernel")]
    ti, tm, tall = res[(name, "tern")]
    print(f"| {what} | {ki:.0f} | {ti:.0f} | {km:.1f} | {tm:.1f} | {ti / ki:.2f} |")
    doc["jobs"][name] = {"nfsd_iops": ki, "tern_iops": ti, "nfsd_mbs": km, "tern_mbs": tm, "ratio": ti / ki,
                         "nfsd_iops_rounds": kall, "tern_iops_rounds": tall}
if jpath:
    with open(jpath, "w") as f:
        json.dump(doc, f, indent=1)
PY
echo
echo "tern-nfsd's counters, and the kernel client's transport line per mount (xprtrdma: ... read, write and"
echo "reply chunk segments, ..., marshaling failures, bad replies, long calls; MRs recycled, orphaned,"
echo "allocated, invalidated by the client itself, ...):"
grep 'tern-nfsd: stats:' "$out/tern-nfsd.log" | tail -1 | sed 's/^/    /'
sed 's/^/    /' "$out/xprt.txt"
