#!/usr/bin/env bash
# perftest next to tern-perf on rxe0, in one run of the Soft-RoCE VM: the
# round-trip latency of a raw verbs SEND / RDMA WRITE ping-pong (ib_send_lat,
# ib_write_lat over rdma_cm, 2, 32 and 100 bytes) against Tern's raw SEND echo and
# its RPC round trip (32 bytes) over pmd/verbs. Prints one table and the
# ratios; --json FILE also writes them. TCG emulation: compare within one
# run, never across machines.
#
#   scripts/measure-rxe.sh [BUILDDIR] [--iters N] [--rounds R] [--against REV]
#                          [--syscalls] [--counters] [--clocks LIST] [--shm]
#                          [--devargs LIST] [--json FILE] [--keep DIR]
#
# BUILDDIR (default build-perf, configured release with apps) must hold
# apps/tern-perf; the script builds it if missing. --rounds runs every case R
# times in the one boot and reports medians (of each run's p50, and of the
# per-round ratios). --against REV also builds REV's tern-perf (from `git
# archive`, in .measure-rxe-base/) and runs it alternately with this tree's,
# so that before and after come from the same boot. --syscalls then counts the
# system calls of one round trip (both sides) with the guest kernel's syscall
# tracepoint. --counters prints the work requests, doorbells and completions
# per RPC on each side (the driver's and the engine's counters) for inline,
# 64 KiB read-chunk and 64 KiB write-chunk RPCs. --keep DIR keeps the raw
# outputs. --clocks runs tern-perf with each TERN_CLOCK of LIST (commas:
# auto,tsc,monotonic; default auto, the guest's choice); docs/performance.md
# says why tsc is the one to compare with perftest there. --shm also runs
# tern-perf over pmd/shm inside the VM: the engine's own cost there, without
# rxe, under the same emulation. --devargs LIST (commas, e.g. inline=0) adds
# a variant of this tree's binary per entry, with it added to the verbs spec.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf iters=5000 json= rounds=1 against= syscalls=0 counters=0 clocks=auto keep= shm=0 devargs=
while (($#)); do
  case $1 in
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --against) against=$2; shift 2 ;;
    --syscalls) syscalls=1; shift ;;
    --counters) counters=1; shift ;;
    --shm) shm=1; shift ;;
    --devargs) devargs=$2; shift 2 ;;
    --keep) keep=$(realpath -m "$2"); shift 2 ;;
    --clocks) clocks=$2; shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-rxe: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
opts=(-Dbuildtype=release -Dapps=true -Dtests=false -Dbenchmarks=false -Dexamples=false)
if [[ ! -x $build/apps/tern-perf ]]; then
  scripts/build.sh "$build" "${opts[@]}" >/dev/null
fi
old=
if [[ -n $against ]]; then
  rev=$(git rev-parse --verify "$against^{commit}")
  base="$top/.measure-rxe-base"
  if [[ ! -x $base/$rev/build/apps/tern-perf ]]; then
    rm -rf "$base/$rev"
    mkdir -p "$base/$rev/src"
    git archive "$rev" | tar -x -C "$base/$rev/src"
    meson setup "$base/$rev/build" "$base/$rev/src" "${opts[@]}" >/dev/null
    nice -n 10 ninja -C "$base/$rev/build" -j2 apps/tern-perf >/dev/null
  fi
  old="$base/$rev/build/apps/tern-perf"
  echo "measure-rxe: against $(git log --oneline -1 "$rev")" >&2
fi
out=$(mktemp -d "$top/.measure-rxe.XXXXXX")
if [[ -n $keep ]]; then
  trap 'mkdir -p "$keep" && cp -r "$out"/. "$keep"/ && rm -rf "$out"' EXIT
else
  trap 'rm -rf "$out"' EXIT
fi
env_args=(-e ITERS="$iters" -e ROUNDS="$rounds" -e SYSCALLS="$syscalls" -e COUNTERS="$counters" -e OUT="$out"
  -e PERF="$build/apps/tern-perf")
[[ -n $old ]] && env_args+=(-e PERF_OLD="$old")
env_args+=(-e CLOCKS="${clocks//,/ }" -e SHM="$shm" -e DEVARGS="${devargs//,/ }")
scripts/rxe-vm/rxe-vm run --timeout 1800 "${env_args[@]}" -- "$top/tests/vm/measure-in-vm.sh"
python3 - "$out" "$json" "$rounds" "$iters" "$([[ -n $old ]] && echo 1 || echo 0)" "$syscalls" "$counters" "$clocks" "$devargs" <<'PY'
import json, sys, os, re, statistics as stt
out, jpath, rounds, iters, have_old, syscalls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6] == "1"
counters = sys.argv[7] == "1"
clocks = sys.argv[8].split(",")
# Variant names as measure-in-vm.sh makes them.
extra = ["new+" + a for a in sys.argv[9].split(",") if a]
sides = [s + ("-" + c if len(clocks) > 1 else "") for s in (["new", "old"] if have_old else ["new"]) + extra for c in clocks]

def perftest(path):
    # perftest prints one-way latency (half the round trip): doubled here, so
    # that every figure is a round trip like tern-perf's.
    lines = open(path).read().splitlines()
    hdr = next(i for i, l in enumerate(lines) if l.strip().startswith("#bytes"))
    # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%  (usec)
    v = lines[hdr + 1].split()
    p50, p99 = 2 * float(v[4]), 2 * float(v[7])
    # perftest prints inf when its CPU-frequency check fails: no figure.
    if not (0 < p50 < float("inf")):
        raise ValueError(f"perftest printed {v[4]}")
    return {"p50_us": p50, "p99_us": p99}

def tern(path):
    j = json.load(open(path))
    return {"p50_us": j["latency_ns"]["p50"] / 1000, "p99_us": j["latency_ns"]["p99"] / 1000}

cases = [("ib_send_lat_s2", "ib_send_lat -R -s 2 (perftest SEND)", perftest, "{}.{}.txt"),
         ("ib_send_lat_s32", "ib_send_lat -R -s 32 (perftest SEND)", perftest, "{}.{}.txt"),
         ("ib_send_lat_s100", "ib_send_lat -R -s 100 (an RPC's bytes)", perftest, "{}.{}.txt"),
         ("ib_write_lat_s32", "ib_write_lat -R -s 32 (perftest WRITE)", perftest, "{}.{}.txt")]
for s in sides:
    cases += [("tern_send." + s, f"tern-perf raw SEND echo, 32 B ({s})", tern, "{}.{}.json"),
              ("tern_rpc." + s, f"tern-perf RPC round trip, 32 B ({s})", tern, "{}.{}.json")]
    if any(f.startswith(f"tern_shm_send.{s}.") for f in os.listdir(out)):
        cases += [("tern_shm_send." + s, f"  over pmd/shm in the VM: raw SEND ({s})", tern, "{}.{}.json"),
                  ("tern_shm_rpc." + s, f"  over pmd/shm in the VM: RPC ({s})", tern, "{}.{}.json")]
r = {"rounds": rounds, "iters": iters, "runs": {}}
for key, label, parse, pat in cases:
    runs = []
    for k in range(1, rounds + 1):
        p = os.path.join(out, pat.format(key, k))
        try:
            runs.append(parse(p))
        except Exception as e:  # a failed run is reported, not hidden
            print(f"measure-rxe: {key} round {k}: no result ({e})", file=sys.stderr)
            runs.append(None)
    r["runs"][key] = runs
def med(key, f="p50_us"):
    v = [x[f] for x in r["runs"].get(key, []) if x]
    return stt.median(v) if v else float("nan")
print(f"{'round trip on rxe0 (TCG VM), median of ' + str(rounds) + ' runs':52s} {'p50 us':>8s} {'p99 us':>8s}  p50 of each run")
for key, label, _, _ in cases:
    runs = r["runs"][key]
    print(f"{label:52s} {med(key):8.1f} {med(key, 'p99_us'):8.1f}  " + " ".join(f"{x['p50_us']:.1f}" if x else "-" for x in runs))
# Ratios per round (same round, minutes apart at most), then their median.
ratios = {}
for s in sides:
    for what in ("send", "rpc"):
        for base in ("ib_send_lat_s2", "ib_send_lat_s32", "ib_send_lat_s100"):
            v = []
            for k in range(rounds):
                a, b = r["runs"][f"tern_{what}.{s}"][k], r["runs"][base][k]
                if a and b:
                    v.append(a["p50_us"] / b["p50_us"])
            if v:
                ratios[f"tern_{what}.{s}/{base}"] = {"median": round(stt.median(v), 3), "each": [round(x, 2) for x in v]}
r["ratios"] = ratios
print("ratios of p50 round trips (median over rounds; each round's):")
for k, v in ratios.items():
    print(f"  {k:42s} {v['median']:6.2f}x   " + " ".join(f"{x:.2f}" for x in v["each"]))

if syscalls:
    # Hist lines: { common_pid: NAME [ PID], id: sys_X [ N] } hitcount: C
    pat = re.compile(r"common_pid:\s*(\S+)\s*\[\s*\d+\], id:\s*(\S+)\s*\[\s*\d+\]\s*\}\s*hitcount:\s*(\d+)")
    def counts(path, exe):
        c = {}
        for line in open(path):
            m = pat.search(line)
            if m and m.group(1) == exe:
                c[m.group(2)] = c.get(m.group(2), 0) + int(m.group(3))
        return c
    files = sorted(f for f in os.listdir(out) if f.startswith("sys.") and f.endswith(".hist"))
    ns = sorted({int(f.split(".")[-2]) for f in files})
    r["syscalls_per_round_trip"] = {}
    if len(ns) == 2:
        lo, hi = ns
        print(f"system calls per round trip, both sides (runs of {hi} minus runs of {lo} round trips, over {hi - lo}):")
        names = [("ib_send_lat", "ib_send_lat")] + [(f"tern_{w}.{s}", "tern-perf") for s in sides for w in ("send", "rpc")]
        for name, exe in names:
            a, b = counts(os.path.join(out, f"sys.{name}.{lo}.hist"), exe), counts(os.path.join(out, f"sys.{name}.{hi}.hist"), exe)
            per = {k: (b.get(k, 0) - a.get(k, 0)) / (hi - lo) for k in set(a) | set(b)}
            per = {k: round(v, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05}
            r["syscalls_per_round_trip"][name] = per
            print(f"  {name:20s} " + ", ".join(f"{k} {v:g}" for k, v in per.items()))
if counters:
    # Both engines print stats_json() on stderr at the end: the engine's
    # counters and, per connection, its QP's driver counters.
    def stats(path, prefix):
        for line in open(path):
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
        raise ValueError(f"no '{prefix}' line in {path}")
    keys = [("send_wrs", "send WRs"), ("reg_mr", "  of them REG_MR"), ("local_inv", "  LOCAL_INV"),
            ("send_inv", "  SEND_WITH_INV"), ("rdma_reads", "  RDMA READ"), ("rdma_writes", "  RDMA WRITE"),
            ("inline_sends", "  sent inline"), ("sends_signaled", "  signaled SENDs"),
            ("doorbells", "send doorbells (post_send calls)"), ("recvs_posted", "receives posted"),
            ("recv_batches", "receive doorbells (post_recv calls)"), ("completions", "completions polled")]
    r["per_rpc"] = {}
    print("per RPC, from the engines' and the driver's counters (all calls of the run, warm-up included):")
    print(f"  {'':36s} " + " ".join(f"{k + ' ' + side:>16s}" for k in ("inline", "read64k", "write64k") for side in ("cli", "srv")))
    table = {}
    for kind in ("inline", "read64k", "write64k"):
        for side, path, prefix in (("cli", f"counters.{kind}.err", "tern-perf client: "),
                                   ("srv", f"counters.{kind}.server.txt", "tern-perf server: engine 0: ")):
            try:
                j = stats(os.path.join(out, path), prefix)
            except Exception as e:
                print(f"measure-rxe: counters {kind} {side}: {e}", file=sys.stderr)
                continue
            conn = j["connections"][0]["counters"]
            calls = conn["calls"] or 1
            both = dict(j["engine"]); both.update(conn)
            table[(kind, side)] = {k: both.get(k, 0) / calls for k, _ in keys}
            r["per_rpc"][f"{kind}.{side}"] = table[(kind, side)]
    for k, label in keys:
        print(f"  {label:36s} " + " ".join(f"{table[(kind, side)][k]:16.2f}" if (kind, side) in table else f"{'-':>16s}"
                                             for kind in ("inline", "read64k", "write64k") for side in ("cli", "srv")))
if jpath:
    json.dump(r, open(jpath, "w"), indent=1)
PY
