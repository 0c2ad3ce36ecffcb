#!/usr/bin/env python3
"""Prints the ninja targets that the tests of some suites run, for
`scripts/build.sh DIR [options] -- TARGETS`: a build that exists only to run
those suites (scripts/test.sh's sanitizer builds) compiles nothing else.

  scripts/suite-targets.py BUILDDIR SUITE...

A test's programs are meson's own record of what it needs (the executable
it runs and every build target among its arguments). When the install check
is among the tests (it runs `meson install --no-rebuild`), everything that
is installed is named too. Programs that no selected test runs -- the
measurement tools run by hand, a tool that only the VM runs -- are left out.
"""
import json
import os
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: suite-targets.py BUILDDIR SUITE...")
    build, suites = sys.argv[1], set(sys.argv[2:])
    intro = lambda what: json.loads(subprocess.check_output(["meson", "introspect", what, build]))
    tests, targets = intro("--tests"), intro("--targets")
    by_id = {t["id"]: t for t in targets}
    chosen = [t for t in tests if suites & {s.split(":")[-1] for s in t["suite"]}]
    if not chosen:
        sys.exit(f"suite-targets.py: no test in suites {sorted(suites)}")
    need = {d for t in chosen for d in t.get("depends", []) if d in by_id}
    if any(any(a.endswith("check-install.sh") for a in t["cmd"]) for t in chosen):
        need |= {t["id"] for t in targets if t["installed"]}
    top = os.path.abspath(build)
    out = sorted({os.path.relpath(f, top) for i in need for f in by_id[i]["filename"]})
    print("\n".join(out))


main()
