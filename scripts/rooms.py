#!/usr/bin/env python3
"""The house's rooms: every folder of src/ and include/spotvisor/ is a room, and the README's
architecture lists them from the ground floor up (the line "Rooms, from the ground floor
up:"). A file may include from its own room or one below it, never from a room above.

Usage: scripts/rooms.py [--root DIR] [--readme FILE] [--stats]
  (no flag)  checks the rule; lists every upward include and exits 1 if there is one
  --stats    prints the house's measures instead (upward includes, files over 400 lines,
             functions over 60 lines, clock reads and Asio timers outside the
             clock seam, and which of them are on real time by design) and exits 0
--root: the tree to look at (default: this repository); --readme: where the order is
written (default: ROOT/README.md), so that an older tree can be measured with today's order.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"spotvisor/([a-z_]+)/[^"]+"')
ORDER_LINE = "Rooms, from the ground floor up:"
# The clock seam's own implementation (util/clock.hpp): the only place that should read the
# machine's clocks or make Asio timers.
SEAM = {"src/util/clock.cpp"}
# Where time must be the machine's, and why: waits on the kernel (a socket, a process) do not
# end sooner in virtual time, a stopwatch of real work measures real work, and the mock
# servers are peers that real clients talk to.
REAL_TIME = [
    ("src/process/", "deadlines of waits on real processes"),
    ("src/http/", "deadlines of real sockets"),
    ("src/etcd/transport.cpp", "deadlines of real sockets"),
    ("src/etcd/line_stream.cpp", "deadlines of real sockets"),
    ("src/checkpoint/catalog.cpp", "stopwatch: how long a validation took"),
    ("src/preflight/probes.cpp", "stopwatch: the disk's write throughput"),
    ("src/mock/", "a test peer that real clients talk to"),
]


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


def continues(line):
    """Whether `line` is a part of a signature that goes on on the next line (not a statement's
    or a block's end, a label, a comment or a preprocessor line)."""
    text = line.strip()
    return bool(text) and not text.endswith((";", "{", "}", ":")) and not text.startswith(("//", "#", "/*", "*"))


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
            # The body closes at the indentation of the signature's first line: a wrapped
            # signature's last line, or a constructor's initializer list (": a_(x) {"), is
            # indented deeper than its '}'.
            first = i
            while first > 0 and continues(lines[first - 1]):
                first -= 1
            indent = re.match(r"\s*", lines[first]).group(0)
            for j in range(i + 1, len(lines)):
                if lines[j] == indent + "}" or lines[j].startswith(indent + "}") and lines[j][len(indent) + 1:].strip() in ("", ";"):
                    body = j - i - 1
                    if body > limit:
                        name = re.sub(r"\s+", " ", " ".join(x.strip() for x in lines[first:i + 1]))[:90]
                        out.append((body, f"{path}:{first + 1}: {name}"))
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
    steady = wall = timers = 0
    per_file = {}
    for f in files:
        rel = f.relative_to(root)
        if str(rel) in SEAM:
            continue
        text = f.read_text(encoding="utf-8")
        s = len(re.findall(r"\b(?:steady_clock|Clock|SteadyClock|clock|clock_type)::now\(\)", text))
        w = len(re.findall(r"\b(?:system_clock|WallClock)::now\(\)|\btime\(nullptr\)|\bUnixMillisNow\(\)", text))
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#include"))
        t = len(re.findall(r"\b(?:steady_timer|system_timer)\b(?!::)", code))
        if s or w or t:
            per_file[rel] = (s, w, t)
        steady, wall, timers = steady + s, wall + w, timers + t
    print(f"outside the clock seam ({', '.join(sorted(SEAM))}): clock reads steady {steady}, wall {wall}; "
          f"Asio timers {timers}; in {len(per_file)} files (steady, wall, timers per file)")
    on_purpose = 0
    for f, (s, w, t) in sorted(per_file.items()):
        why = next((reason for prefix, reason in REAL_TIME if str(f).startswith(prefix)), "")
        if why:
            on_purpose += s + w
        print(f"  {s:3} {w:3} {t:3} {f}" + (f"   [real time: {why}]" if why else ""))
    print(f"clock reads outside the seam that are not on real time by design: {steady + wall - on_purpose}")


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
