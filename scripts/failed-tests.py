#!/usr/bin/env python3
"""The failure lines and the end of each failed test's output, from a ctest console log (`ctest
--output-on-failure --output-log FILE`), printed again last: a CI log that keeps only the
head and the tail of a long run still shows why each test failed.

Usage: scripts/failed-tests.py LOG [LINES]   (LINES per failed test, default 60)
"""

import re
import sys

# "12/600 Test #34: NAME ....   Passed    0.01 sec", "... ***Failed  ..." ("***Timeout",
# "***Exception: ..."); a parameterized gtest's NAME goes on with ": # GetParam() = ...".
RESULT = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (.*?)\s+[\d.]+ sec$")
START = re.compile(r"^\s+Start\s+\d+: ")
FAILURE = re.compile(r"(: Failure$|^AssertionError|^FAIL: |^ERROR: |Error: )")
END = re.compile(r"^(\d+% tests passed|Total Test time|Label Time Summary|The following tests|\[[A-Z_]+\] ?$)")


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    lines_per_test = int(sys.argv[2]) if len(sys.argv) == 3 else 60
    try:
        with open(sys.argv[1], errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"failed-tests: cannot read {sys.argv[1]}: {e.strerror}", file=sys.stderr)
        return 1
    failed = []  # (name, status, output lines)
    current = None
    for line in lines:
        match = RESULT.match(line)
        if match:
            current = None
            body = match.group(1)
            if not re.search(r"\s(Passed|Not Run \(Disabled\))$", body):
                name = re.split(r"( \.| \*\*\*)", body, maxsplit=1)[0].strip()
                status = body[body.index("***") + 3:].strip() if "***" in body else body.rsplit(None, 1)[-1]
                current = (name, status, [])
                failed.append(current)
        elif START.match(line) or END.match(line):
            current = None
        elif current is not None:
            current[2].append(line)
    for name, status, output in failed:
        # gtest's and unittest's failure lines with the two after each (the expression and
        # its values), since a message that prints a whole log puts them far from the end.
        said = []
        for i, line in enumerate(output):
            if FAILURE.search(line):
                said.extend(output[i:i + 3] + ["  ..."])
        if said:
            print(f"\n---- {name}: {status}; its failure lines ----")
            print("\n".join(said[:80]))
        print(f"\n---- {name}: {status}; the last {lines_per_test} lines of its output ----")
        print("\n".join(output[-lines_per_test:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
