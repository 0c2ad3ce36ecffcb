#!/usr/bin/env python3
"""Precompiles tests/test_pch.h for one build directory (-Dtest_pch=true).

  scripts/test-pch.py BUILD_ROOT HEADER OUT_H OUT_GCH

gcc uses a precompiled header only if it was built with the flags of the
file that includes it, and meson builds its own (cpp_pch) once per target,
which for one-file test programs is no saving. So this takes the flags the
test files share from meson's compile_commands.json (the most common set
among the C++ files under tests/ that use gtest), builds OUT_GCH with them
and copies HEADER to OUT_H beside it. A file whose flags differ in a way
that matters gets gcc's -Winvalid-pch warning and the plain header instead:
slower, never wrong.
"""
import collections
import json
import os
import shlex
import shutil
import subprocess
import sys


def flags_of(command, out_h):
    args = shlex.split(command)
    if os.path.basename(args[0]) == "ccache":
        args = args[1:]
    kept, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "-c", "-MQ", "-MF"):
            i += 2
            continue
        if a == "-include" and args[i + 1].endswith(os.path.basename(out_h)):
            i += 2
            continue
        if a in ("-MD", "-fpch-preprocess"):
            i += 1
            continue
        kept.append(a)
        i += 1
    return kept


def main():
    root, header, out_h, out_gch = sys.argv[1:]
    with open(os.path.join(root, "compile_commands.json")) as f:
        commands = json.load(f)
    sets = collections.Counter()
    for c in commands:
        name = c["file"].replace(os.sep, "/")
        if "/tests/" in name and name.endswith(".cc") and "-DGTEST_HAS_PTHREAD" in c["command"]:
            flags = flags_of(c["command"], out_h)
            # -I and -D of a single target do not decide the set; the rest does.
            sets[tuple(a for a in flags if not a.startswith("-I"))] += 1
    if not sets:
        sys.exit("test-pch.py: no gtest test file in compile_commands.json")
    common = sets.most_common(1)[0][0]
    shutil.copyfile(header, out_h)
    subprocess.run(list(common) + ["-x", "c++-header", out_h, "-o", out_gch], cwd=root, check=True)


if __name__ == "__main__":
    main()
