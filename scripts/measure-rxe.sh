#!/usr/bin/env bash
# perftest next to tern-perf on rxe0, in one run of the Soft-RoCE VM: the
# round-trip latency of a raw verbs SEND / RDMA WRITE ping-pong (ib_send_lat,
# ib_write_lat over rdma_cm) against Tern's raw SEND echo and its RPC round
# trip over pmd/verbs. Prints one table and the ratios; --json FILE also
# writes them. TCG emulation: compare within one run, never across machines.
#
#   scripts/measure-rxe.sh [BUILDDIR] [--iters N] [--json FILE]
#
# BUILDDIR (default build-perf, configured release with apps) must hold
# apps/tern-perf; the script builds it if missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build-perf iters=5000 json=
while (($#)); do
  case $1 in
    --iters) iters=$2; shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-rxe: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [[ ! -x $build/apps/tern-perf ]]; then
  scripts/build.sh "$build" -Dbuildtype=release -Dapps=true >/dev/null
fi
out=$(mktemp -d "$top/.measure-rxe.XXXXXX")
trap 'rm -rf "$out"' EXIT
scripts/rxe-vm/rxe-vm run --timeout 900 -e ITERS="$iters" -e OUT="$out" -e PERF="$build/apps/tern-perf" -- \
  "$top/tests/vm/measure-in-vm.sh"
python3 - "$out" "$json" <<'PY'
import json, sys, os
out, jpath = sys.argv[1], sys.argv[2]
# perftest prints one-way latency (half the round trip): doubled here, so
# that every figure is a round trip like tern-perf's.
r = {}
for name in ("ib_send_lat", "ib_write_lat"):
    lines = open(os.path.join(out, name + ".txt")).read().splitlines()
    hdr = next(i for i, l in enumerate(lines) if l.strip().startswith("#bytes"))
    # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%  (usec)
    v = lines[hdr + 1].split()
    r[name] = {"p50_us": 2 * float(v[4]), "p99_us": 2 * float(v[7]), "one_way_typical_us": float(v[4])}
for name in ("tern_send", "tern_rpc"):
    j = json.load(open(os.path.join(out, name + ".json")))
    r[name] = {"p50_us": j["latency_ns"]["p50"] / 1000, "p99_us": j["latency_ns"]["p99"] / 1000,
               "requests": j["requests"]}
rows = [("ib_send_lat -R (perftest, 2 B)", "ib_send_lat"), ("ib_write_lat -R (perftest, 2 B)", "ib_write_lat"),
        ("tern-perf raw SEND echo (32 B)", "tern_send"), ("tern-perf RPC round trip (32 B args)", "tern_rpc")]
print(f"{'round trip on rxe0 (TCG VM)':40s} {'p50 us':>9s} {'p99 us':>9s}")
for label, k in rows:
    v = r.get(k)
    if v: print(f"{label:40s} {v['p50_us']:9.1f} {v['p99_us']:9.1f}")
base = r["ib_send_lat"]["p50_us"]
for k in ("tern_send", "tern_rpc"):
    r[k + "_vs_ib_send_lat"] = round(r[k]["p50_us"] / base, 2)
print(f"ratios (p50): tern SEND / ib_send_lat = {r['tern_send_vs_ib_send_lat']:.2f}x, "
      f"tern RPC / ib_send_lat = {r['tern_rpc_vs_ib_send_lat']:.2f}x")
if jpath:
    json.dump(r, open(jpath, "w"), indent=1)
PY
