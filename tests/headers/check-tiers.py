#!/usr/bin/env python3
"""Checks the header tiers that lib/<area>/meson.build and pmd/<name>/meson.build
declare (see lib/meson.build):
  - every header under lib/, pmd/ and include/ is in exactly one tier list;
  - a public header includes other Tern headers only by relative paths
    ("x.h" in its own area, "../area/x.h" across), which resolve the same in
    lib/ and under <prefix>/include/tern/ with nothing but -I<prefix>/include
    on the user's path ("area/x.h" would need include/tern there too, the
    generic names base/, mem/, engine/ with it); and those name only public
    headers, since nothing else is installed.
usage: check-tiers.py SRCROOT --public FILE... --other FILE... --api NAME...
FILEs are paths from SRCROOT; NAMEs are include names ("base/result.h")."""
import os
import re
import sys


def main():
    root = sys.argv[1]
    groups = {"--public": [], "--other": [], "--api": []}
    cur = None
    for a in sys.argv[2:]:
        if a in groups:
            cur = a
        else:
            groups[cur].append(a)
    public, other, api = groups["--public"], groups["--other"], set(groups["--api"])

    errors = []
    declared = public + other
    for f in sorted(set(f for f in declared if declared.count(f) > 1)):
        errors.append(f"{f}: listed in more than one tier")
    on_disk = []
    for top in ("lib", "pmd", "include"):
        for d, _, files in os.walk(os.path.join(root, top)):
            on_disk += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".h")]
    for f in sorted(set(on_disk) - set(declared)):
        area = os.path.dirname(f)
        errors.append(f"{f}: in no tier; add it to public_headers, driver_headers or private_headers "
                      f"in {area}/meson.build")

    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for f in public:
        area = os.path.basename(os.path.dirname(f))
        with open(os.path.join(root, f)) as fh:
            for n, line in enumerate(fh, 1):
                m = include.match(line)
                if not m:
                    continue
                inc = m.group(1)
                parts = inc.split("/")
                if len(parts) == 1:
                    name = area + "/" + inc  # same area
                elif len(parts) == 3 and parts[0] == "..":
                    name = parts[1] + "/" + parts[2]
                else:
                    errors.append(f"{f}:{n}: public header includes \"{inc}\"; write \"x.h\" (same area) or "
                                  f"\"../area/x.h\": installed users have only <prefix>/include on their path")
                    continue
                if name not in api:
                    errors.append(f"{f}:{n}: public header includes \"{inc}\" ({name}), which is not public "
                                  f"(not installed)")

    for e in errors:
        print(e)
    print(f"{len(declared)} headers in tiers ({len(public)} public), {len(on_disk)} on disk: "
          f"{'OK' if not errors else str(len(errors)) + ' problem(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
