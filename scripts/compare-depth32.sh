#!/usr/bin/env bash
# The RPC rate at depth 32 between two processes, two builds alternated
# round by round (the machine's state drifts; alternating puts both builds
# in each stretch of it): tern-perf server --rpc --once on CPU 1, client
# --rpc --mode bw --qd 32 --size 32 on CPU 0, one fresh server per run.
# Prints each run, each build's median, and the ratio; with --stats, the
# batches each side's visits executed (pmd/shm's exec_batch_* counters,
# from --engine-stats: builds without them print nothing there).
# Meaningful only on an idle machine (load average < 2): it says so when not.
#   scripts/compare-depth32.sh BASE_BUILD NEW_BUILD [--rounds N] [--seconds S] [--stats]
#   e.g. scripts/compare-depth32.sh /work/main/build-perf build-perf --rounds 7
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,11p' "$0"; exit 2; }
base=$1 new=$2
shift 2
rounds=7 seconds=1 stats=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --stats) stats=1; shift ;;
    *) echo "compare-depth32.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for b in "$base" "$new"; do
  [[ -x $b/apps/tern-perf ]] || { echo "compare-depth32.sh: no $b/apps/tern-perf (a release build dir)" >&2; exit 2; }
done
out=$(mktemp -d /tmp/tern-d32-XXXXXX)
sock=$out/perf.sock
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # build label round
  local perf=$1/apps/tern-perf tag=$2-$3 sp
  rm -f "$sock"
  "$perf" server --rpc --once --dev "shm:path=$sock" --lcore 1 --quiet --engine-stats 2>"$out/$tag.srv" &
  sp=$!
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
  "$perf" client --rpc --mode bw --qd 32 --size 32 --seconds "$seconds" --dev "shm:path=$sock" --lcore 0 \
    --engine-stats --json "$out/$tag.json" >/dev/null 2>"$out/$tag.cli" || echo "run $tag failed" >&2
  wait "$sp" || true
}
for r in $(seq "$rounds"); do
  # The order flips every round: neither build always runs first.
  if ((r % 2)); then run "$base" base "$r"; run "$new" new "$r"; else run "$new" new "$r"; run "$base" base "$r"; fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" "$stats" <<'PY'
import glob, json, os, re, statistics, sys
out, rounds, stats = sys.argv[1], int(sys.argv[2]), sys.argv[3] == '1'
rate = {}
for tag in ('base', 'new'):
    rs = []
    for r in range(1, rounds + 1):
        try:
            j = json.load(open(f'{out}/{tag}-{r}.json'))
            rs.append(j['requests_per_s'] if 'requests_per_s' in j else j['runs'][0]['requests_per_s'])
        except Exception:
            pass
    rate[tag] = rs
    print(f"{tag}: " + ' '.join(f'{x / 1e6:.2f}' for x in rs) + ' M calls/s' +
          (f', median {statistics.median(rs) / 1e6:.2f}' if rs else ''))
if rate['base'] and rate['new']:
    print(f"new / base (medians): {statistics.median(rate['new']) / statistics.median(rate['base']):.3f}")
if stats:
    names = ['exec_batch_1', 'exec_batch_2_3', 'exec_batch_4_7', 'exec_batch_8_15', 'exec_batch_16_31', 'exec_batch_32']
    for tag in ('base', 'new'):
        for side, ext, pat in (('client', 'cli', 'tern-perf client: connection: '),
                               ('server', 'srv', r'tern-perf server: engine \d+: connection \d+ \(last looked at\): ')):
            tot = {}
            for f in glob.glob(f'{out}/{tag}-*.{ext}'):
                for line in open(f):
                    m = re.match(pat + '(.*)', line)
                    if m:
                        for kv in m.group(1).split():
                            k, v = kv.split('=')
                            tot[k] = tot.get(k, 0) + int(v)
            b = [tot.get(n, 0) for n in names]
            if sum(b) == 0:
                continue
            visits, descs = tot.get('visits', 0), tot.get('descs_in', 0)
            print(f"{tag} {side}: batches " + ' '.join(f"{n[11:]}:{x / sum(b):.2f}" for n, x in zip(names, b)) +
                  f"; {descs / sum(b):.1f} messages a batch; visits that executed none {1 - sum(b) / max(visits, 1):.2f}")
print(f"raw results: {out}")
PY
