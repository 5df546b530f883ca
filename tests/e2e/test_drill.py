"""End-to-end (g): `spotvisor drill` on the PyTorch example passes (exit 0, last line
`identical`) for every kind of interruption (notice, sigterm, kill), with and without a
result file (without one it compares the final checkpoints' tensors), and fails (exit 1,
last line `differ`) on a variant whose resume does not restore the RNGs
(`--break-rng-restore`), and on one that does not restore the data order
(`--break-data-restore`), each caught on its own.

A drill interrupts at a random moment; when that moment falls after the end of the run
(the table says "the job finished before this interruption") or before the first
checkpoint, the drill proves nothing either way, so the test draws another seed.

Run: SPOTVISOR_BINARY=build/spotvisor /usr/bin/python3 -m unittest tests.e2e.test_drill -v
"""

from __future__ import annotations

import re
import subprocess
import unittest
from typing import List, Tuple

from tests.e2e.support import E2ECase, SLOW, clean_env, example_command, write_job

ROW = re.compile(r"^\| (\d+) \| (\w+) \| ([^|]*) \| ([^|]*) \| ([^|]*) \| ([^|]*) \|(.*)$", re.MULTILINE)


class Drill(E2ECase):

    def drill(self, *trainer_flags: str, kind: str = "notice",
              result_file: bool = True) -> Tuple[int, str, List[tuple]]:
        """Runs the drill (new seeds until an interruption lands mid-run); (rc, output, rows)."""
        command = example_command(step_sleep=0.1) + list(trainer_flags)
        if not result_file:
            at = command.index("--result-file")
            del command[at:at + 2]
        job = write_job(self.dir / f"job-{kind}.yaml", name="e2e-drill", command=command,
                        resume_args=["--resume_from={checkpoint}"], pattern="ckpt_step{step}",
                        result_file="./result.txt" if result_file else None)
        for seed in (11, 23, 37):
            scratch = self.dir / f"scratch-{kind}-{seed}"
            proc = subprocess.run([self.binary, "drill", "--config", str(job), "--interruptions", "1",
                                   "--kind", kind, "--seed", str(seed), "--scratch", str(scratch)],
                                  cwd=self.dir, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=600 * SLOW)
            out = proc.stdout   # the verdict; stderr holds only trouble, shown on failure
            if proc.stderr.strip():
                out += "\n(stderr)\n" + proc.stderr
            rows = [m.groups() for m in ROW.finditer(proc.stdout)]
            landed = rows and rows[0][3].strip() not in ("?", "0") and "finished" not in rows[0][6]
            if landed or proc.returncode not in (0, 1) or not rows:
                return proc.returncode, out, rows
        self.fail(f"no drill interruption landed mid-run in three seeds:\n{out}")

    @staticmethod
    def last_stdout_line(out: str) -> str:
        return out.split("\n(stderr)\n")[0].strip().splitlines()[-1]

    def test_the_example_passes(self):
        rc, out, rows = self.drill()
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.last_stdout_line(out), "identical", out)
        self.assertEqual(len(rows), 1, out)
        _, kind, reached, resumed, lost, to_resume, note = rows[0]
        self.assertEqual(kind, "notice")
        self.assertEqual(lost.strip(), "0", f"a notice must cost no steps:\n{out}")
        self.assertRegex(to_resume, r"\d+\.\d+ s")

    def test_sigterm_and_kill_interruptions_pass(self):
        for kind in ("sigterm", "kill"):
            with self.subTest(kind=kind):
                rc, out, rows = self.drill(kind=kind)
                self.assertEqual(rc, 0, out)
                self.assertEqual(self.last_stdout_line(out), "identical", out)
                self.assertEqual(rows[0][1], kind, out)

    def test_without_a_result_file_the_final_checkpoints_are_compared(self):
        rc, out, _ = self.drill(result_file=False)
        self.assertEqual(rc, 0, out)
        self.assertEqual(self.last_stdout_line(out), "identical", out)
        rc, out, _ = self.drill("--break-rng-restore", result_file=False)
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.last_stdout_line(out), "differ", out)

    def test_a_trainer_that_does_not_restore_its_rng_fails(self):
        rc, out, rows = self.drill("--break-rng-restore")
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.last_stdout_line(out), "differ", out)
        self.assertRegex(out, r"scratch: ")   # kept for the user to inspect

    def test_a_trainer_that_does_not_restore_its_data_order_fails(self):
        rc, out, rows = self.drill("--break-data-restore")
        self.assertEqual(rc, 1, out)
        self.assertEqual(self.last_stdout_line(out), "differ", out)


if __name__ == "__main__":
    unittest.main()
