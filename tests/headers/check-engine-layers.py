#!/usr/bin/env python3
"""Checks how lib/engine's files may include each other (docs/engine.md,
"The connections' core"):
  - no include cycle among lib/engine's files: an include never runs back
    up to a header that (directly or not) includes the includer;
  - the headers stack in order -- connection.h, conn_core.h,
    conn_datapath.h, the roles (client_conn.h, server_conn.h), and
    engine_impl.h on top -- and no header includes one above it, nor one
    role's header the other's;
  - engine_impl.h (EngineImpl: devices, CM, listening, admission, the
    connection table) is included only by the engine's own files
    (engine.cc, engine_*.cc): a connection file sees its engine only as a
    ConnCore;
  - each machine's state is written only in its machine's files: a
    request's through ReqMachine::enter (request_machine.*), a server call's
    through enter(SrvCall*, ...) (server_call_machine.*), a connection's
    phase through ConnMachine's private enter (conn_machine.*).
usage: check-engine-layers.py SRCROOT"""
import os
import re
import sys

ENGINE = "lib/engine"
# Bottom to top; a header may include only headers of its own rank or below.
STACK = [["connection.h"], ["conn_core.h"], ["conn_datapath.h"], ["client_conn.h", "server_conn.h"],
         ["engine_impl.h"]]
ROLES = {"client_conn.h", "server_conn.h"}
# Who may include engine_impl.h: the engine's own files.
ENGINE_SIDE = re.compile(r"^engine(_[a-z_]+)?\.(cc|h)$")
# A state write and the files it may be in.
WRITERS = [
    (re.compile(r"\benter\(\s*ReqState::"), ("request_machine.h", "request_machine.cc"),
     "a request's state is written only by request_machine.cc (ClientConn::process and its steps)"),
    (re.compile(r"\benter\(\s*[A-Za-z_>.-]+\s*,\s*SrvState::"), ("server_call_machine.h", "server_call_machine.cc"),
     "a server call's state is written only by server_call_machine.cc (ServerConn::process and its steps)"),
    (re.compile(r"\b(state_|phase_)\s*=[^=]"), ("request_machine.h", "server_call_machine.h", "conn_machine.h",
                                                "conn_machine.cc"),
     "a machine's state member is assigned only by its enter()"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def engine_includes(path):
    """The lib/engine files that `path` includes, by file name."""
    out = []
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if inc.startswith("engine/"):
                out.append((n, inc[len("engine/"):]))
            elif "/" not in inc and os.path.exists(os.path.join(os.path.dirname(path), inc)):
                out.append((n, inc))  # same-folder form (public headers)
    return out


def main():
    root = sys.argv[1]
    folder = os.path.join(root, ENGINE)
    files = sorted(f for f in os.listdir(folder) if f.endswith((".h", ".cc")))
    graph = {f: engine_includes(os.path.join(folder, f)) for f in files}
    rank = {h: i for i, group in enumerate(STACK) for h in group}
    errors = []

    for f in files:
        for n, inc in graph[f]:
            where = f"{ENGINE}/{f}:{n}"
            if inc == "engine_impl.h" and not ENGINE_SIDE.match(f):
                errors.append(f"{where}: includes engine_impl.h; only the engine's own files (engine.cc, engine_*.cc) "
                              f"may: a connection file reaches its engine through conn_core.h")
            if f in rank and inc in rank and rank[inc] > rank[f]:
                errors.append(f"{where}: {f} includes {inc}, which stands above it "
                              f"({' <- '.join('/'.join(g) for g in STACK)})")
            if f in ROLES and inc in ROLES and inc != f:
                errors.append(f"{where}: one role's header includes the other's ({inc})")

    # Cycles: a depth-first walk; a file met again while still on the path
    # closes a cycle.
    state = {}
    path = []

    def visit(f):
        state[f] = 1
        path.append(f)
        for n, inc in graph.get(f, []):
            if inc not in graph:
                continue
            if state.get(inc) == 1:
                cyc = path[path.index(inc):] + [inc]
                errors.append(f"{ENGINE}/{f}:{n}: include cycle: {' -> '.join(cyc)}")
            elif inc not in state:
                visit(inc)
        path.pop()
        state[f] = 2

    for f in files:
        if f not in state:
            visit(f)

    for f in files:
        with open(os.path.join(folder, f)) as fh:
            for n, line in enumerate(fh, 1):
                code = line.split("//", 1)[0]
                for pat, allowed, why in WRITERS:
                    if pat.search(code) and f not in allowed:
                        errors.append(f"{ENGINE}/{f}:{n}: {why}: {line.strip()}")

    for e in errors:
        print(e)
    print(f"{len(files)} files in {ENGINE}: {'OK' if not errors else str(len(errors)) + ' problem(s)'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
