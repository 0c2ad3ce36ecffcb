#!/usr/bin/env bash
# rpcrdma-torture --responder: the torture server answers Tern's own client
# engine (in the tool's process, over pmd/shm) with every legal and illegal
# reply shape; every MUST case passes, every case is tagged with an RFC 8166
# or 8797 section and a level, and ids are unique (docs/conformance.md).
set -euo pipefail
torture=$1
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch torture-resp
pids=()

# The catalogue in four processes: every case has its own engine and
# connection, and most of a case's time is waiting out quiet periods and
# timeouts of fixed length (the whole catalogue: ~8.5 CPU-s under ASan+UBSan
# against 51 s of wall time idle), so one process made meson, which runs
# this test alone, wait for each case in turn. Cases are dealt out in turn
# (neighbours, such as the credit cases, cost alike); every listed case runs
# once.
mapfile -t ids < <("$torture" --responder --list | awk '$1 ~ /\// {print $1}')
((${#ids[@]} > 0)) || fail "rpcrdma-torture --responder --list listed no case"
shards=4
((shards <= ${#ids[@]})) || shards=${#ids[@]}
for ((k = 0; k < shards; ++k)); do
  args=()
  for ((i = k; i < ${#ids[@]}; i += shards)); do args+=(--case "${ids[i]}"); done
  # The generous timeout is a guard for slow (sanitizer) builds, not a measure.
  timeout 600 "$torture" --responder --timeout 10 --quiet --json "$dir/out$k.json" "${args[@]}" \
    >"$dir/out$k.txt" 2>&1 &
  pids+=($!)
done
rc=0
for ((k = 0; k < shards; ++k)); do
  r=0
  wait "${pids[k]}" || r=$?
  cat "$dir/out$k.txt"
  [[ $r == 0 || $r == 1 ]] || fail "rpcrdma-torture --responder (part $k of $shards) exited $r"
  ((r == 0)) || rc=1
done
python3 - "$dir" "$shards" "${#ids[@]}" <<'PY'
import json, sys
d, shards, listed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cases = [c for k in range(shards) for c in json.load(open(f"{d}/out{k}.json"))["cases"]]
assert len(cases) == listed, (len(cases), listed)
json.dump({"cases": cases}, open(f"{d}/out.json", "w"))
PY
python3 - "$dir/out.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
assert len(cases) >= 100, len(cases)
assert {c["level"] for c in cases} == {"MUST", "SHOULD", "MAY"}, {c["level"] for c in cases}
for c in cases:
    for k in ("id", "section", "level", "result", "requirement", "expected"):
        assert c[k] != "", (k, c)
    assert c["section"].startswith("RFC 8166 ") or c["section"].startswith("RFC 8797 "), c
ids = [c["id"] for c in cases]
assert len(ids) == len(set(ids)), "duplicate case ids"
assert any(i.startswith("two/") for i in ids), "no case with two connections"
bad = [c for c in cases if c["level"] == "MUST" and c["result"] != "pass"]
for c in bad:
    print("MUST case not passed:", c["id"], c["section"], "--", c["requirement"], "| seen:", c["seen"])
assert not bad, f"{len(bad)} MUST cases failed"
print(len(cases), "responder cases;", sum(c["result"] == "pass" for c in cases), "passed")
PY
[[ $rc == 0 ]] || fail "rpcrdma-torture --responder exited $rc though no MUST case failed"
