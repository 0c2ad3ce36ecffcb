#!/usr/bin/env bash
# rpcrdma-torture --responder: the torture server answers Tern's own client
# engine (in the tool's process, over pmd/shm) with every legal and illegal
# reply shape; every MUST case passes, every case is tagged with an RFC 8166
# or 8797 section and a level, and ids are unique (docs/conformance.md).
set -euo pipefail
torture=$1
dir=$(mktemp -d /tmp/tern-torture-resp-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The generous timeout is a guard for slow (sanitizer) builds, not a measure.
set +e
timeout 600 "$torture" --responder --timeout 10 --quiet --json "$dir/out.json" >"$dir/out.txt" 2>&1
rc=$?
set -e
cat "$dir/out.txt"
[[ $rc == 0 || $rc == 1 ]] || fail "rpcrdma-torture --responder exited $rc"
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
