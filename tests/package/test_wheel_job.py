"""The wheel as an ML user uses it after `pip install spotvisor`: in the fresh venv of
test_wheel.py (Debian's python with its torch 1.13), `spotvisor run --config job.yaml --
python train.py` with the example trainer on the installed spotvisor_helper; a file notice,
the checkpoint inside the window, exit 75; then a resume to the digest of an uninterrupted run.

Run: SPOTVISOR_DIST=dist /usr/bin/python3 -m unittest -v tests.package.test_wheel_job
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Dict, List, Sequence

from tests.e2e.processes import events
from tests.package import test_wheel
from tests.package.test_wheel import SLOW, TRAINER, TRAINER_ARGS, installed_venv, run

tearDownModule = test_wheel.tearDownModule  # removes the venv when this module ran alone


# ---------------------------------------------------------------------------------------
# (d) A job, as a user runs it after `pip install spotvisor`

JOB_YAML = """\
# written by tests/package/test_wheel.py: the command comes after `--`
job:
  name: wheel-job
  resume_args: ["--resume_from={checkpoint}"]
  env: {OMP_NUM_THREADS: "1", PYTHONUNBUFFERED: "1"}
  result_file: ./result.txt
provider:
  kind: file
  file: ./notice
  poll_interval: 100ms
signals:
  grace: 30s
checkpoints:
  dir: ./ckpt
  pattern: "ckpt_step{step}"
  keep: 0
telemetry:
  state_dir: ./state
  log_format: text
"""

class Run:
    """`spotvisor run --config job.yaml -- COMMAND`, found on PATH, output into a file."""

    def __init__(self, workdir: Path, log: str, command: Sequence[str], env: Dict[str, str]) -> None:
        self.log = workdir / log
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["spotvisor", "run", "--config", "job.yaml", "--", *command], cwd=workdir,
                                         env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        return "\n".join(self.text().splitlines()[-60:])

    def poll(self, what, timeout: float, why: str):
        end = time.monotonic() + timeout * SLOW
        while True:
            exited = self.proc.poll() is not None
            found = what(self.text())
            if found:
                return found
            if exited or time.monotonic() > end:
                state = f"spotvisor exited ({self.proc.returncode})" if exited else f"{timeout * SLOW:.0f}s passed"
                raise AssertionError(f"{state} without {why}; {self.log}:\n{self.tail()}")
            time.sleep(0.05)

    def wait_for(self, pattern: str, timeout: float) -> "re.Match[str]":
        return self.poll(lambda t: re.search(pattern, t, re.MULTILINE), timeout, f"a line matching {pattern!r}")

    def wait_event(self, name: str, timeout: float, where=lambda e: True) -> Dict[str, str]:
        return self.poll(lambda t: next((e for e in events(t, name) if where(e)), None), timeout,
                         f"a matching event={name}")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"spotvisor did not exit within {timeout * SLOW:.0f}s; {self.log}:\n"
                                 f"{self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL (the trainer dies with it) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


class Job(unittest.TestCase):
    def setUp(self) -> None:
        self.venv = installed_venv()
        probe = run([self.venv.python, "-c", "import torch, numpy"], 120, env=self.venv.env(), check=False)
        if probe.returncode != 0:
            self.skipTest(f"no torch/NumPy for {self.venv.python} (Debian: python3-torch):\n{probe.stdout}")
        self.dir = Path(tempfile.mkdtemp(prefix="spotvisor-wheel-job-")).resolve()   # as spotvisor will see it
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.runs: List[Run] = []
        self.addCleanup(lambda: [r.kill() for r in self.runs])

    def start(self, workdir: Path, log: str, command: Sequence[str]) -> Run:
        r = Run(workdir, log, command, self.venv.env())
        self.runs.append(r)
        return r

    def reference_digest(self, trainer: Path) -> str:
        """The trainer run directly in the venv, uninterrupted."""
        ref = self.dir / "reference"
        ref.mkdir()
        run([self.venv.python, trainer, "--ckpt-dir", ref / "ckpt", "--result-file", ref / "result.txt",
             *TRAINER_ARGS], 300, cwd=ref, env=self.venv.env())
        return (ref / "result.txt").read_text().strip()

    def test_a_file_notice_a_checkpoint_in_the_window_75_and_a_resume(self):
        job = self.dir / "job"
        job.mkdir()
        trainer = job / "train.py"
        shutil.copy2(TRAINER, trainer)
        # The example falls back to <checkout>/python when spotvisor_helper cannot be
        # imported; copied here it has none, so it runs on the venv's helper or not at all.
        self.assertFalse((trainer.parents[2] / "python" / "spotvisor_helper").exists())
        (job / "job.yaml").write_text(JOB_YAML)
        command = ["python", "train.py", "--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
                   *TRAINER_ARGS, "--step-sleep", "0.15"]
        expected = self.reference_digest(trainer)

        sv = self.start(job, "run1.log", command)
        # No Python in front: the process PATH found is the installed binary itself.
        self.assertEqual(os.readlink(f"/proc/{sv.proc.pid}/exe"), str(self.venv.spotvisor.resolve()))
        started = sv.wait_event("trainer_started", 60)
        self.assertTrue(started["argv"].startswith("python train.py --ckpt-dir " + str(job / "ckpt")), started)
        sv.wait_for(r"^\[trainer\] saved step=10 reason=periodic", 180)
        sv.wait_for(r"^step=1[3-9] ", 60)
        deadline = int(time.time()) + 30
        (job / "notice.tmp").write_text(json.dumps({"deadline": deadline, "kind": "drill"}))
        os.rename(job / "notice.tmp", job / "notice")

        notice = sv.wait_event("notice", 30, lambda e: "warning_ms" in e)
        self.assertEqual((notice["provider"], notice["kind"], notice["action"]), ("file", "drill", "stop"), notice)
        saved = sv.wait_for(r"^\[trainer\] saved step=(\d+) reason=stop path=(\S+)$", 60)
        step, path = int(saved.group(1)), saved.group(2)
        self.assertTrue(10 < step < 40, f"step {step}: the notice did not land mid-run")
        self.assertEqual(path, str(job / "ckpt" / f"ckpt_step{step}"))
        manifest = Path(path) / "spotvisor.manifest.json"
        self.assertLess(manifest.stat().st_mtime, deadline, "the checkpoint was written after the deadline")
        stopping = sv.wait_for(r"^\[trainer\] stopping step=(\d+)(.*)$", 30)
        self.assertEqual(int(stopping.group(1)), step)
        self.assertRegex(stopping.group(2), r"notice=drill provider=file action=stop seconds_left=\d+",
                         "the trainer did not read the notice file")
        drained = sv.wait_event("drained", 60, lambda e: "newest_good" in e)
        self.assertEqual((drained["newest_good"], drained["step"]), (path, str(step)), drained)
        self.assertIsNone(sv.proc.poll(), "after draining, spotvisor waits for the machine to go")
        run([self.venv.python, "-m", "spotvisor_helper", "verify", path], 60, cwd=job, env=self.venv.env())

        # The machine goes away: the service is stopped. The signal reaches spotvisor itself.
        sv.proc.send_signal(signal.SIGTERM)
        self.assertEqual(sv.wait(60), 75, sv.tail())
        self.assertFalse((job / "result.txt").exists(), "a stopped trainer must not write a result")

        # On the next machine (the same disk) the notice is gone: a new run resumes.
        (job / "notice").unlink()
        sv2 = self.start(job, "run2.log", command)
        self.assertEqual(sv2.wait(300), 0, sv2.tail())
        log = sv2.text()
        self.assertEqual([(e["attempt"], e["resume"]) for e in events(log, "trainer_started")], [("2", path)], log)
        self.assertIn(f"[trainer] resumed from={path} step={step} rng=yes", log)
        self.assertEqual((job / "result.txt").read_text().strip(), expected,
                         "the resumed run ends with other weights than an uninterrupted one")


# ---------------------------------------------------------------------------------------
# pip uninstall


if __name__ == "__main__":
    unittest.main()
