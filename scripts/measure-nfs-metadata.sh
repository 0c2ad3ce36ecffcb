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
#                                   [--tern-b 'OPTS'] [--tern-b-env 'NAME=VALUE ...'] [--tern-b-bin PATH]
#                                   [--probe] [--strace N] [--keep DIR]
#
# --tern adds options to tern-nfsd's command line (e.g. '--busy-poll', to
# see what its wait mode costs per call). --tern-b runs a second tern-nfsd
# ("tern-nfsd B", with those options, '' for none) in the same boot and
# rounds: two variants compared without a boot's noise between them (e.g.
# --tern '--caller-ring off' --tern-b ''); --tern-b-env sets its environment
# (with --tern-b; e.g. 'TERN_CLOCK=tsc'), --tern-b-bin its binary (with
# --tern-b; default BUILDDIR's: another revision's tern-nfsd, for a
# before/after in one boot). Each tern-nfsd's counters at
# exit are printed last. --probe adds, per phase and server, what one name
# of the storm cost the whole guest (CPU ms of its 2 vCPUs, idle ms, context
# switches) and the server's threads and the storm's own (CPU ms, voluntary
# and involuntary switches), summed over the rounds: CPU per call against
# waiting per call. --strace N adds, after the rounds, a storm of N names on
# each tern-nfsd with strace -f -c attached to it one phase at a time, and
# prints its system calls per name (the host's strace, shared into the
# guest with its libraries; slow under TCG: ~1.5 min a phase at N = 100).
# --keep DIR keeps the guest's raw output (probe files, strace tables).
# BUILDDIR (default build-perf, release with apps) must hold apps/tern-nfsd
# and tests/vm/tern-meta-storm; the script builds them if missing. Take the
# machine's quiet lock first when others share it (docs/nfs-gateway.md).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf files=1000 rounds=3 json= tern_opts= probe= strace_n= keep=
tern_b=()
while (($#)); do
  case $1 in
    --files) files=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    --tern) tern_opts=$2; shift 2 ;;
    --tern-b) tern_b+=(-e "TERN_OPTS_B=$2"); shift 2 ;;
    --tern-b-env) tern_b+=(-e "TERN_ENV_B=$2"); shift 2 ;;
    --tern-b-bin) tern_b+=(-e "NFSD_B=$(realpath "$2")"); shift 2 ;;
    --probe) probe=1; shift ;;
    --strace) strace_n=$2; shift 2 ;;
    --keep) keep=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-nfs-metadata: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [[ ! -x $build/apps/tern-nfsd || ! -x $build/tests/vm/tern-meta-storm ]]; then
  [[ -d $build ]] || scripts/build.sh "$build" -Dbuildtype=release -Dapps=true >/dev/null
  ninja -C "$build" apps/tern-nfsd tests/vm/tern-meta-storm >/dev/null
fi
out=$(mktemp -d "$top/.measure-nfs-metadata.XXXXXX")
trap '[[ -z $keep ]] || cp -r "$out/." "$keep/"; rm -rf "$out"' EXIT
[[ -z $keep ]] || mkdir -p "$keep"
extra=()
[[ -z $probe ]] || extra+=(-e PROBE=1)
if [[ -n $strace_n ]]; then
  mkdir -p "$out/strace"
  cp "$(command -v strace)" "$out/strace/"
  ldd "$(command -v strace)" | awk '$3 ~ /^\// {print $3}' | xargs -I{} cp {} "$out/strace/"
  extra+=(-e STRACE="$out/strace" -e STRACE_N="$strace_n")
fi
scripts/rxe-vm/rxe-vm run --timeout 1800 -e OUT="$out" -e NFSD="$build/apps/tern-nfsd" \
  -e STORM="$build/tests/vm/tern-meta-storm" -e N="$files" -e ROUNDS="$rounds" -e TERN_OPTS="$tern_opts" "${tern_b[@]}" "${extra[@]}" \
  -- tests/vm/nfs-metadata.sh
STRACE_N_HOST=$strace_n python3 - "$out" "$rounds" "$json" "$files" <<'PY'
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
# --probe: per phase and server, the whole guest's and the threads' cost per name.
if os.path.exists(os.path.join(out, "kernel-1.probe")):
    ms = 1000.0 / os.sysconf("SC_CLK_TCK")  # /proc's ticks: USER_HZ, 100 on Linux
    sysd, thr = {}, {}
    for srv in servers:
        for r in range(1, rounds + 1):
            path = os.path.join(out, f"{srv}-{r}.probe")
            if not os.path.exists(path):
                continue
            for line in open(path):
                f = line.split()
                if f[1] == "system":
                    d = sysd.setdefault((f[0], srv), {})
                    for k, v in (x.split("=") for x in f[2:]):
                        d[k] = d.get(k, 0) + int(v)
                else:
                    # One storm process per run: "storm" across the rounds.
                    comm = "storm" if f[3].startswith("tern-meta-stor") else f[3]
                    d = thr.setdefault((f[0], srv, comm), {})
                    for k, v in (x.split("=") for x in f[4:]):
                        d[k] = d.get(k, 0) + int(v)
    print()
    print(f"--probe: per storm name ({files} x {rounds} rounds): wall ms; the whole guest (2 vCPUs): CPU busy ms, "
          "idle ms, context switches; per thread kind: CPU ms, voluntary + involuntary switches")
    print()
    print("| phase | server | wall ms | guest busy ms | guest idle ms | guest ctxt | threads (comm: cpu ms, vcs+ivcs) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    n = files * rounds
    for p in order:
        for srv in servers:
            d = sysd.get((p, srv))
            if not d:
                continue
            busy = sum(d.get(k, 0) for k in ("user", "nice", "system", "irq", "softirq"))
            wall = sum(phases[(p, srv)]) * 1000.0
            parts = [f"{comm}: {t['ticks'] * ms / n:.3f}, {t['vcs'] / n:.2f}+{t['ivcs'] / n:.2f}"
                     for (pp, ss, comm), t in sorted(thr.items()) if pp == p and ss == srv]
            print(f"| {p} | {srv} | {wall / n:.3f} | {busy * ms / n:.3f} | {d.get('idle', 0) * ms / n:.3f} | "
                  f"{d.get('ctxt', 0) / n:.2f} | {'; '.join(parts)} |")
# --strace: system calls per name, per phase, on each tern-nfsd.
import glob, re
for srv in ("tern", "ternb"):
    traced = sorted(glob.glob(os.path.join(out, f"{srv}-strace-*.txt")))
    if not traced:
        continue
    k = int(os.environ.get("STRACE_N_HOST") or 1)
    print()
    print(f"--strace on {srv}: system calls per name (all threads; unlink: 3 calls a name), by phase")
    for path in traced:
        ph = path.rsplit("-strace-", 1)[1][:-4]
        per = {}
        for line in open(path):
            m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m and m.group(2) != "total":
                per[m.group(2)] = int(m.group(1))
        top = ", ".join(f"{c} {v / k:.1f}" for c, v in sorted(per.items(), key=lambda x: -x[1]))
        print(f"- {ph}: {sum(per.values()) / k:.1f}: {top}")
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
