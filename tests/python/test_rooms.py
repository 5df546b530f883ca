"""scripts/rooms.py, the layout step's check that no file includes from a room above its
own: a small tree with the README's order line, one include downward (allowed) and one
upward (refused, named with file and line)."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "rooms.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True)


class RoomsTest(unittest.TestCase):
    def tree(self, supervisor_includes):
        root = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        (root / "README.md").write_text("# x\n\nRooms, from the ground floor up: `util` `log`\n`supervisor` `telemetry`\n\nmore\n")
        for rel, text in {
            "include/spotvisor/util/result.hpp": "#pragma once\n",
            "include/spotvisor/log/log.hpp": '#pragma once\n#include "spotvisor/util/result.hpp"\n',
            "src/telemetry/report.cpp": '#include "spotvisor/supervisor/fsm.hpp"\n',
            "src/supervisor/fsm.cpp": "".join(f'#include "spotvisor/{i}"\n' for i in supervisor_includes),
        }.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return root

    def test_includes_from_below_pass(self):
        r = run(self.tree(["log/log.hpp", "util/result.hpp"]))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no include from a room above", r.stdout)

    def test_an_include_from_above_fails_and_names_the_line(self):
        r = run(self.tree(["log/log.hpp", "telemetry/report.hpp"]))
        self.assertEqual(r.returncode, 1)
        self.assertIn("src/supervisor/fsm.cpp:2: room 'supervisor' includes from 'telemetry'", r.stdout)

    def test_a_room_missing_from_the_order_fails(self):
        r = run(self.tree(["platform/slurm.hpp"]))
        self.assertEqual(r.returncode, 1)
        self.assertIn("rooms missing from the README's order: platform", r.stdout)

    def test_stats_count_upward_includes(self):
        r = subprocess.run([sys.executable, str(SCRIPT), "--stats", "--root", str(self.tree(["telemetry/x.hpp"]))],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("upward includes: 1", r.stdout)

    def test_stats_count_a_function_by_its_own_body(self):
        """A constructor with an initializer list is as long as its body (not up to the next
        '}' at the list's indentation), and a function whose signature wraps is counted."""
        root = self.tree([])
        body = "".join(f"  x += {n};\n" for n in range(70))
        (root / "src/supervisor/fsm.cpp").write_text(
            "Fsm::Fsm(int a)\n    : a_(a) {}\n\n"
            "Fsm::Fsm(int a, int b)\n    : a_(a), b_(b) {\n  Init();\n}\n\n"
            "void Fsm::Other() {\n  if (x) {\n    y();\n  }\n}\n\n"
            "std::vector<Action> Fsm::OnSomething(const SomeEvent& e,\n"
            "                                     TimePoint now) {\n" + body + "}\n")
        r = subprocess.run([sys.executable, str(SCRIPT), "--stats", "--root", str(root)], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("functions over 60 lines: 1\n", r.stdout)
        self.assertIn("70 src/supervisor/fsm.cpp:15: std::vector<Action> Fsm::OnSomething(const SomeEvent& e, TimePoint now) {",
                      r.stdout)


if __name__ == "__main__":
    unittest.main()
