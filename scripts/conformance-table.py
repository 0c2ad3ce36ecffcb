#!/usr/bin/env python3
"""The difference table of two rpcrdma-torture runs (--json): per case, both
pass, both fail the same way, or they differ; then the cases that differ,
with what each responder did. Used by scripts/measure-conformance.sh.

    scripts/conformance-table.py A.json B.json [--names A,B] [--known DOC.md]

With --known, the cases that differ must each match a glob listed in DOC.md's
section "Known differences" (one backquoted glob per list item, fnmatch with
{a,b} alternatives): exit 1, naming them, when one does not -- a difference
nobody has written down (scripts/test.sh, after the VM stage). A case missing
from either run also fails it.
"""
import argparse
import fnmatch
import re
import json
import sys


def load(path):
    with open(path) as f:
        return {c["id"]: c for c in json.load(f)["cases"]}


def expand(glob):
    """{a,b} alternatives, which fnmatch does not know, expanded."""
    m = re.search(r"\{([^{}]*)\}", glob)
    if not m:
        return [glob]
    out = []
    for alt in m.group(1).split(","):
        out += expand(glob[: m.start()] + alt + glob[m.end():])
    return out


def known_globs(path):
    globs, inside = [], False
    for line in open(path):
        if line.startswith("#"):
            inside = line.strip("# \n").lower() == "known differences"
            continue
        if inside and line.lstrip().startswith("- "):
            for g in re.findall(r"`([^`]+)`", line.split(":")[0]):
                globs += expand(g)
    return globs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", default="A,B")
    ap.add_argument("--known", help="a doc whose 'Known differences' section lists the accepted ones")
    args = ap.parse_args()
    na, nb = args.names.split(",")
    a, b = load(args.a), load(args.b)
    ids = [i for i in a if i in b]
    groups = {"both pass": [], "both skip": [], "both fail": [], "differ": []}
    for i in ids:
        ra, rb = a[i]["result"], b[i]["result"]
        if ra == rb == "pass":
            groups["both pass"].append(i)
        elif ra == rb == "skip":
            groups["both skip"].append(i)
        elif ra == rb == "FAIL":
            groups["both fail"].append(i)
        else:
            groups["differ"].append(i)
    by_level = {}
    for g, members in groups.items():
        for i in members:
            by_level.setdefault(g, {}).setdefault(a[i]["level"], 0)
            by_level[g][a[i]["level"]] += 1
    print(f"| outcome | MUST | SHOULD | MAY | total |")
    print(f"| --- | ---: | ---: | ---: | ---: |")
    for g in groups:
        lv = by_level.get(g, {})
        print(f"| {g} | {lv.get('MUST', 0)} | {lv.get('SHOULD', 0)} | {lv.get('MAY', 0)} | {len(groups[g])} |")
    for g in ("both fail", "differ"):
        if not groups[g]:
            continue
        print(f"\n{g}:\n")
        print(f"| case | level | {na} | {nb} |")
        print("| --- | --- | --- | --- |")
        for i in groups[g]:
            sa = f"{a[i]['result']}: {a[i]['seen']}".replace("|", "/")
            sb = f"{b[i]['result']}: {b[i]['seen']}".replace("|", "/")
            print(f"| {i} | {a[i]['level']} | {sa} | {sb} |")
    missing = sorted(set(a) ^ set(b))
    if missing:
        print(f"\nin one run only: {', '.join(missing)}")
    if args.known:
        globs = known_globs(args.known)
        if not globs:
            print(f"\n{args.known} lists no known differences", file=sys.stderr)
            return 1
        new = [i for i in groups["differ"] if not any(fnmatch.fnmatchcase(i, g) for g in globs)]
        if new or missing:
            print(f"\nFAIL: {len(new)} difference(s) not written down in {args.known}"
                  f" (section 'Known differences'): {', '.join(new) or '-'}"
                  + (f"; in one run only: {', '.join(missing)}" if missing else ""), file=sys.stderr)
            return 1
        print(f"\n{len(groups['differ'])} difference(s), each written down in {args.known}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
