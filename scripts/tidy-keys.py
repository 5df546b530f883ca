#!/usr/bin/env python3
"""Prints one line per translation unit of src/: "KEY FILE", where KEY is a hash of all
clang-tidy reads to judge it — the clang-tidy version, .clang-tidy, the compile command
(the clone's path taken out) and the contents of the source and of every header it
includes (the compiler's own -M list). Two clones at different paths give the same key to
the same code; any change to a file the unit includes, to a flag or to a check gives a new
one. scripts/tidy.sh keeps the keys of the units that passed and checks only the others.

    scripts/tidy-keys.py ROOT COMPILE_COMMANDS TIDY_BINARY
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def dependencies(entry):
    """The files the unit includes, by the compiler's own reckoning (-M)."""
    args = shlex.split(entry["command"])
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    if out[-1] != entry["file"]:
        out.append(entry["file"])
    made = subprocess.run(out[:1] + ["-M"] + out[1:], cwd=entry["directory"], capture_output=True, text=True)
    if made.returncode != 0:
        return None  # a unit that does not compile: clang-tidy will say why
    names = made.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    return sorted(set(os.path.normpath(os.path.join(entry["directory"], n)) for n in names))


def key(entry, root, common):
    deps = dependencies(entry)
    if deps is None:
        return None
    h = hashlib.sha256(common)
    h.update(entry["command"].replace(root, "<root>").encode())
    for path in deps:
        h.update(b"\0" + path.replace(root, "<root>").encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def main():
    root, database, tidy = sys.argv[1], sys.argv[2], sys.argv[3]
    root = os.path.realpath(root)
    with open(database) as f:
        entries = {}
        for e in json.load(f):  # the first command for a file, the one clang-tidy takes
            path = os.path.realpath(e["file"])
            if path.startswith(os.path.join(root, "src") + "/"):
                entries.setdefault(path, e)
        entries = list(entries.values())
    version = subprocess.run([tidy, "--version"], capture_output=True, text=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        common = version.encode() + b"\0" + f.read()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        keys = pool.map(lambda e: key(e, root, common), entries)
        for entry, k in zip(entries, keys):
            rel = os.path.relpath(os.path.realpath(entry["file"]), root)
            print(f"{k or 'none'} {rel}")


if __name__ == "__main__":
    main()
