#!/usr/bin/env python3
"""The house's rooms: every folder of src/ and include/spotvisor/ is a room, and the README's
architecture lists them from the ground floor up (the line "Rooms, from the ground floor
up:"). A file may include from its own room or one below it, never from a room above.

Usage: scripts/rooms.py [--root DIR] [--readme FILE] [--stats]
  (no flag)  checks the rule; lists every upward include and exits 1 if there is one
  --stats    prints the house's measures instead (upward includes, files over 400 lines,
             functions over 60 lines, clock reads) and exits 0
--root: the tree to look at (default: this repository); --readme: where the order is
written (default: ROOT/README.md), so that an older tree can be measured with today's order.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"spotvisor/([a-z_]+)/[^"]+"')
ORDER_LINE = "Rooms, from the ground floor up:"


def rooms_order(readme):
    """The rooms in the README's order, bottom first."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith(ORDER_LINE):
            names = []
            for text in [line[len(ORDER_LINE):]] + lines[i + 1:]:
                if not text.strip():
                    break
                names += re.findall(r"`([a-z_]+)`", text)
            if names:
                return names
    sys.exit(f"rooms.py: {readme}: no line starting with '{ORDER_LINE}' followed by `room` names")


def room_of(root, path):
    """'supervisor' for src/supervisor/x.cpp and include/spotvisor/supervisor/x.hpp;
    'main' for src/main.cpp."""
    rel = path.relative_to(root).parts
    if rel[0] == "include":
        return rel[2]
    return rel[1] if len(rel) > 2 else "main"


def sources(root):
    files = sorted((root / "src").rglob("*.[ch]pp")) + sorted((root / "include" / "spotvisor").rglob("*.hpp"))
    return [f for f in files if f.is_file()]


def upward_includes(root, order):
    rank = {name: i for i, name in enumerate(order)}
    rank["main"] = len(order)
    found, unknown = [], set()
    for f in sources(root):
        own = room_of(root, f)
        if own not in rank:
            unknown.add(own)
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target not in rank:
                unknown.add(target)
            elif rank[target] > rank[own]:
                found.append(f"{f.relative_to(root)}:{n}: room '{own}' includes from '{target}', a room above it")
    return found, unknown


def long_functions(path, limit):
    """Function bodies longer than `limit` lines, found the way clang-format lays them out:
    a line ending in ') {' (or ') const {' ...) that is not a control statement or a
    lambda, and the '}' at the same indentation that closes it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    head = re.compile(r"^(\s*)(?!if\b|for\b|while\b|switch\b|else\b|catch\b|do\b|return\b|namespace\b|struct\b|class\b|enum\b)"
                      r"[^=\[;]*\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>]+\s*)?\{$")
    out = []
    i = 0
    while i < len(lines):
        m = head.match(lines[i])
        if m:
            indent = m.group(1)
            for j in range(i + 1, len(lines)):
                if lines[j] == indent + "}" or lines[j].startswith(indent + "}") and lines[j][len(indent) + 1:].strip() in ("", ";"):
                    body = j - i - 1
                    if body > limit:
                        name = re.sub(r"\s+", " ", lines[i].strip())[:90]
                        out.append((body, f"{path}:{i + 1}: {name}"))
                    i = j
                    break
        i += 1
    return out


def stats(root, order):
    upward, _ = upward_includes(root, order)
    print(f"upward includes: {len(upward)}")
    for line in upward:
        print("  " + line)
    files = sources(root)
    big = [(len(f.read_text(encoding='utf-8').splitlines()), f.relative_to(root)) for f in files]
    big = sorted([b for b in big if b[0] > 400], reverse=True)
    print(f"files over 400 lines: {len(big)}")
    for n, f in big:
        print(f"  {n:5} {f}")
    funcs = []
    for f in files:
        if f.suffix == ".cpp":
            funcs += long_functions(f, 60)
    funcs.sort(reverse=True)
    print(f"functions over 60 lines: {len(funcs)}")
    for n, where in funcs:
        print(f"  {n:5} {pathlib.Path(where).relative_to(root) if where.startswith(str(root)) else where}")
    steady = wall = 0
    per_file = {}
    for f in files:
        text = f.read_text(encoding="utf-8")
        s = len(re.findall(r"\b(?:steady_clock|Clock|SteadyClock|clock)::now\(\)", text))
        w = len(re.findall(r"\b(?:system_clock|WallClock)::now\(\)|\btime\(nullptr\)", text))
        if s or w:
            per_file[f.relative_to(root)] = (s, w)
        steady, wall = steady + s, wall + w
    print(f"clock reads: steady {steady}, wall {wall} (steady, wall per file), in {len(per_file)} files")
    for f, (s, w) in sorted(per_file.items()):
        print(f"  {s:3} {w:3} {f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--readme", type=pathlib.Path)
    parser.add_argument("--stats", action="store_true")
    args = parser.parse_args()
    root = args.root.resolve()
    order = rooms_order(args.readme or root / "README.md")
    if args.stats:
        stats(root, order)
        return 0
    upward, unknown = upward_includes(root, order)
    for line in upward:
        print(line)
    if unknown:
        print(f"!! rooms.py: rooms missing from the README's order: {', '.join(sorted(unknown))}")
    if upward or unknown:
        print(f"!! rooms.py: {len(upward)} upward includes (order: {' < '.join(order)})")
        return 1
    print(f"rooms: {len(sources(root))} files, no include from a room above (order: {' < '.join(order)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
