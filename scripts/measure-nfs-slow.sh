#!/usr/bin/env bash
# IOPS on slow storage (issue 22): a device with injected latency
# (device-mapper's delay target over a RAM disk, --delay-ms each way) under
# an ext4 export, in one boot of the Soft-RoCE VM (tests/vm/nfs-slow-storage.sh).
# fio 4 KiB random reads and random writes, --jobs jobs at --depth each,
# O_DIRECT, through the kernel's NFSv3/RDMA client on tern-nfsd (one engine)
# and on the kernel's nfsd (8 threads), and on the device itself; --rounds
# rounds of --seconds, alternating the servers' order. Prints median IOPS,
# tern-nfsd / nfsd and each server / device, and per NFS procedure the
# client's calls, mean queue time (waiting for a credit shows there) and
# mean round trip, and what the servers' threads were blocked in (D state,
# sampled every 20 ms). TCG emulation: ratios only.
#
#   scripts/measure-nfs-slow.sh [BUILDDIR] [--seconds S] [--rounds N] [--delay-ms MS]
#       [--depth N] [--jobs N] [--tern 'OPTIONS;OPTIONS...'] [--json FILE]
#
# --tern: tern-nfsd option sets, ';'-separated, each measured as its own
# server (default: one, tern-nfsd's defaults). BUILDDIR (default build-perf,
# release with apps) must hold apps/tern-nfsd; built if missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf secs=5 rounds=2 delay=2 depth=32 jobs=4 tern= json=
while (($#)); do
  case $1 in
    --seconds) secs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --delay-ms) delay=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --tern) tern=$2; shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-nfs-slow: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [[ ! -x $build/apps/tern-nfsd ]]; then
  scripts/build.sh "$build" -Dbuildtype=release -Dapps=true >/dev/null
fi
out=$(mktemp -d "$top/.measure-nfs-slow.XXXXXX")
trap 'rm -rf "$out"' EXIT
# 3 GiB: the RAM disks hold every job's file on both servers and the raw slices.
RXEVM_MEM=${RXEVM_MEM:-3072} scripts/rxe-vm/rxe-vm run --timeout 1800 -e OUT="$out" -e NFSD="$build/apps/tern-nfsd" \
  -e SECS="$secs" -e ROUNDS="$rounds" -e DELAY_MS="$delay" -e DEPTH="$depth" -e JOBS="$jobs" \
  -e TERN_VARIANTS="$tern" -- tests/vm/nfs-slow-storage.sh
python3 - "$out" "$rounds" "$json" "$secs" "$delay" "$depth" "$jobs" "$tern" <<'PY'
import glob, json, os, statistics, sys
sys.path.insert(0, "scripts")
import nfs_mountstats
out, rounds, jpath, secs, delay, depth, jobs, tern = sys.argv[1:9]
rounds = int(rounds)
variants = tern.split(";") if tern else [""]
servers = ["device", "kernel"] + [f"tern{i}" for i in range(len(variants))]
label = {"device": "device", "kernel": "nfsd"}
for i, v in enumerate(variants):
    label[f"tern{i}"] = "tern-nfsd" + (f" ({v.strip()})" if v.strip() else "")
res, ops = {}, {}
for rw, side in (("randread", "read"), ("randwrite", "write")):
    for s in servers:
        iops = []
        for r in range(1, rounds + 1):
            with open(os.path.join(out, f"{s}-{rw}-{r}.json")) as f:
                iops.append(json.load(f)["jobs"][0][side]["iops"])
            if s != "device":
                mnt = "/mnt/kernel" if s == "kernel" else "/mnt/tern"
                d, x = nfs_mountstats.delta(open(os.path.join(out, f"{s}-{rw}-{r}.before")).read(),
                                            open(os.path.join(out, f"{s}-{rw}-{r}.after")).read(), mnt)
                for op, v in d.items():
                    a = ops.setdefault((rw, s, op), [0, 0, 0])
                    a[0] += v[0]; a[1] += v[1]; a[2] += v[2]
        res[(rw, s)] = (statistics.median(iops), iops)
print(f"fio 4 KiB random I/O, {jobs} jobs x depth {depth}, O_DIRECT, {rounds} rounds of {secs} s, medians; "
      f"device: RAM disk behind dm-delay {delay} ms; exports on ext4 on such a device; "
      f"tern-nfsd 1 engine, nfsd 8 threads")
print()
print("| job | server | IOPS | / device | / nfsd | rounds |")
print("| --- | --- | ---: | ---: | ---: | --- |")
doc = {"rounds": rounds, "seconds": int(secs), "delay_ms": float(delay), "depth": int(depth), "jobs": int(jobs), "runs": {}}
for rw in ("randread", "randwrite"):
    dev, kern = res[(rw, "device")][0], res[(rw, "kernel")][0]
    for s in servers:
        m, allr = res[(rw, s)]
        print(f"| {rw} | {label[s]} | {m:.0f} | {m / dev:.2f} | {m / kern:.2f} | {', '.join(f'{x:.0f}' for x in allr)} |")
        doc["runs"][f"{rw}/{label[s]}"] = {"iops": m, "rounds": allr, "of_device": m / dev, "of_nfsd": m / kern}
print()
print("the client's view per server (all rounds, mountstats): calls, mean queue time before transmission (ms;")
print("waiting for a transport credit shows here) and mean round trip (ms)")
print()
print("| job | server | procedure | calls | queue ms | RTT ms |")
print("| --- | --- | --- | ---: | ---: | ---: |")
for (rw, s, op), (n, q, rtt) in sorted(ops.items()):
    if op in ("READ", "WRITE", "COMMIT"):
        print(f"| {rw} | {label[s]} | {op} | {n} | {q / n:.2f} | {rtt / n:.2f} |")
print()
print("the servers' threads blocked (D state) while fio ran, sampled every 20 ms: mean count, and the")
print("wait channels most seen (share of blocked samples)")
print()
print("| job | server | blocked threads (mean, max) | wait channels |")
print("| --- | --- | ---: | --- |")
import collections
for rw in ("randread", "randwrite"):
    for s in servers:
        if s == "device":
            continue
        counts, chans = [], collections.Counter()
        for r in range(1, rounds + 1):
            try:
                lines = open(os.path.join(out, f"{s}-{rw}-{r}.waits")).read().splitlines()
            except OSError:
                continue
            for ln in lines:
                w = ln.split()
                counts.append(len(w))
                chans.update(w)
        if not counts:
            continue
        tot = sum(chans.values()) or 1
        top = ", ".join(f"{c} {n / tot:.0%}" for c, n in chans.most_common(4))
        print(f"| {rw} | {label[s]} | {statistics.mean(counts):.1f}, {max(counts)} | {top} |")
if jpath:
    with open(jpath, "w") as f:
        json.dump(doc, f, indent=1)
PY
echo
echo "tern-nfsd's last counters per variant:"
for f in "$out"/tern*.log; do echo "  $(basename "$f" .log): $(grep 'tern-nfsd: stats:' "$f" | tail -1)"; done
