#!/usr/bin/env bash
# A metadata storm through the kernel's NFSv3/RDMA client, tern-nfsd (one
# engine) next to the kernel's nfsd (8 threads) in one boot of the
# Soft-RoCE VM, each exporting a tmpfs (tests/vm/nfs-metadata.sh): create,
# stat, rename, link, symlink, readlink, unlink, mkdir, rmdir and fsstat
# over --files names each, --rounds times, alternating which server goes
# first. Prints, per phase, the median wall time on each server and their
# ratio (tern-nfsd / nfsd), and per NFS procedure the calls and the client's
# mean round trip (mountstats' RTT) on each. TCG emulation: ratios only.
#
#   scripts/measure-nfs-metadata.sh [BUILDDIR] [--files N] [--rounds N] [--json FILE] [--tern 'OPTS']
#                                   [--tern-b 'OPTS']
#
# --tern adds options to tern-nfsd's command line (e.g. '--busy-poll', to
# see what its wait mode costs per call). --tern-b runs a second tern-nfsd
# ("tern-nfsd B", with those options, '' for none) in the same boot and
# rounds: two variants compared without a boot's noise between them (e.g.
# --tern '--caller-ring off' --tern-b ''). Each tern-nfsd's counters at
# exit are printed last.
# BUILDDIR (default build-perf, release with apps) must hold apps/tern-nfsd
# and tests/vm/tern-meta-storm; the script builds them if missing. Take the
# machine's quiet lock first when others share it (docs/nfs-gateway.md).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf files=1000 rounds=3 json= tern_opts=
tern_b=()
while (($#)); do
  case $1 in
    --files) files=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    --tern) tern_opts=$2; shift 2 ;;
    --tern-b) tern_b=(-e "TERN_OPTS_B=$2"); shift 2 ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-nfs-metadata: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [[ ! -x $build/apps/tern-nfsd || ! -x $build/tests/vm/tern-meta-storm ]]; then
  [[ -d $build ]] || scripts/build.sh "$build" -Dbuildtype=release -Dapps=true >/dev/null
  ninja -C "$build" apps/tern-nfsd tests/vm/tern-meta-storm >/dev/null
fi
out=$(mktemp -d "$top/.measure-nfs-metadata.XXXXXX")
trap 'rm -rf "$out"' EXIT
scripts/rxe-vm/rxe-vm run --timeout 1800 -e OUT="$out" -e NFSD="$build/apps/tern-nfsd" \
  -e STORM="$build/tests/vm/tern-meta-storm" -e N="$files" -e ROUNDS="$rounds" -e TERN_OPTS="$tern_opts" "${tern_b[@]}" \
  -- tests/vm/nfs-metadata.sh
python3 - "$out" "$rounds" "$json" "$files" <<'PY'
import json, os, statistics, sys
sys.path.insert(0, "scripts")
import nfs_mountstats
out, rounds, jpath, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
mnt = {"kernel": "/mnt/kernel", "tern": "/mnt/tern", "ternb": "/mnt/ternb"}
servers = ["kernel", "tern"] + (["ternb"] if os.path.exists(os.path.join(out, "ternb-1.txt")) else [])
phases, ops = {}, {}
for srv in servers:
    for r in range(1, rounds + 1):
        for line in open(os.path.join(out, f"{srv}-{r}.txt")):
            p, _, sec = line.split()
            phases.setdefault((p, srv), []).append(float(sec))
        d, _ = nfs_mountstats.delta(open(os.path.join(out, f"{srv}-{r}.before")).read(),
                                    open(os.path.join(out, f"{srv}-{r}.after")).read(), mnt[srv])
        for op, (n, _, rtt, _) in d.items():
            ops.setdefault((op, srv), []).append((n, rtt))
order = []
for (p, _) in phases:
    if p not in order:
        order.append(p)
print(f"metadata storm through the kernel's NFSv3/RDMA client, {files} names per phase, {rounds} rounds, "
      f"medians (tern-nfsd: 1 engine; nfsd: 8 threads; tmpfs exports)")
print()
print("| phase | nfsd s | tern-nfsd s | tern-nfsd / nfsd |")
print("| --- | ---: | ---: | ---: |")
doc = {"files": files, "rounds": rounds, "phases": {}, "procedures": {}}
for p in order:
    k, t = statistics.median(phases[(p, "kernel")]), statistics.median(phases[(p, "tern")])
    print(f"| {p} | {k:.3f} | {t:.3f} | {t / k:.2f} |")
    doc["phases"][p] = {"nfsd_s": k, "tern_s": t, "ratio": t / k}
print()
print("per NFS procedure over all rounds: calls, and the client's mean round trip (mountstats RTT, ms)")
print()
print("| procedure | nfsd calls | tern-nfsd calls | nfsd RTT ms | tern-nfsd RTT ms | tern-nfsd / nfsd |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
names = sorted({op for (op, _) in ops})
for op in names:
    kn = sum(n for n, _ in ops.get((op, "kernel"), [])); kr = sum(x for _, x in ops.get((op, "kernel"), []))
    tn = sum(n for n, _ in ops.get((op, "tern"), [])); tr = sum(x for _, x in ops.get((op, "tern"), []))
    km = kr / kn if kn else float("nan"); tm = tr / tn if tn else float("nan")
    ratio = tm / km if kn and tn and km > 0 else float("nan")
    print(f"| {op} | {kn} | {tn} | {km:.3f} | {tm:.3f} | {ratio:.2f} |")
    doc["procedures"][op] = {"nfsd_calls": kn, "tern_calls": tn, "nfsd_rtt_ms": km, "tern_rtt_ms": tm}
if "ternb" in servers:
    print()
    print("tern-nfsd B (--tern-b) next to tern-nfsd (--tern), the same boot and rounds")
    print()
    print("| phase | nfsd s | tern-nfsd / nfsd | tern-nfsd B / nfsd | B / tern-nfsd |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for p in order:
        k, t, b = (statistics.median(phases[(p, s)]) for s in ("kernel", "tern", "ternb"))
        print(f"| {p} | {k:.3f} | {t / k:.2f} | {b / k:.2f} | {b / t:.2f} |")
    print()
    print("| procedure | nfsd RTT ms | tern-nfsd RTT ms | tern-nfsd B RTT ms | tern-nfsd / nfsd | B / nfsd | B / tern-nfsd |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for op in names:
        m = {}
        for s in ("kernel", "tern", "ternb"):
            n = sum(c for c, _ in ops.get((op, s), [])); r = sum(x for _, x in ops.get((op, s), []))
            m[s] = r / n if n else float("nan")
        if not all(v == v and v > 0 for v in m.values()):
            continue
        print(f"| {op} | {m['kernel']:.3f} | {m['tern']:.3f} | {m['ternb']:.3f} | {m['tern'] / m['kernel']:.2f} | "
              f"{m['ternb'] / m['kernel']:.2f} | {m['ternb'] / m['tern']:.2f} |")
for log in ("tern-nfsd.log", "ternb-nfsd.log"):
    path = os.path.join(out, log)
    if os.path.exists(path):
        stats = [l.strip() for l in open(path, errors="replace") if "stats:" in l]
        if stats:
            print()
            print(f"{log}: {stats[-1]}")
if jpath:
    with open(jpath, "w") as f:
        json.dump(doc, f, indent=1)
PY
