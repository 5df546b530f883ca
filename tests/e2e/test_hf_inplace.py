"""End-to-end (f): a trainer that writes Hugging Face-style `checkpoint-<step>/` directories
IN PLACE (tests/e2e/hf_trainer.py: no temp dir, no rename, `trainer_state.json` last) is
SIGKILLed mid-write several times under the real spotvisor. The half-written directory,
which carries the final name, is never resumed from: spotvisor (`checkpoints.format: hf`)
rejects and quarantines it and resumes from the previous complete one; the run ends with
the digest of an uninterrupted run.

Run: SPOTVISOR_BINARY=build/spotvisor /usr/bin/python3 -m unittest tests.e2e.test_hf_inplace -v
"""

from __future__ import annotations

import os
import re
import signal
import time
import unittest
from pathlib import Path

from tests.e2e.support import (E2ECase, deadline, events, hf_command, pid_alive, read_attempts,
                               reference_digest, write_job)

# Kill while the second checkpoint of each attempt is being written, at a different file
# each time: mid-way through the model file, mid-way through the RNG file (model,
# optimizer and scheduler complete), and while trainer_state.json itself is being written.
KILL_AT = ("pytorch_model.bin", "rng_state.pth", "trainer_state.json")


class HfInPlace(E2ECase):

    def test_half_written_checkpoint_is_never_resumed(self):
        D = reference_digest("hf")
        job = write_job(self.dir / "job.yaml", name="e2e-hf-inplace",
                        command=hf_command(step_sleep=0.02, write_sleep=0.15),
                        resume_args=["--resume_from_checkpoint", "{checkpoint}"],
                        pattern="checkpoint-{step}", fmt="hf")
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        kills = []   # (attempt, step being written, file that existed, trainer said "wrote")
        for attempt, target in enumerate(KILL_AT, start=1):
            pid = self.trainer_pid(sv, attempt, 180)
            started_at = re.search(rf"event=trainer_started attempt={attempt} ", sv.text()).end()
            writing = sv.wait_for(r"^\[hf\] writing checkpoint-(\d+)\n(?:.*\n)*?\[hf\] writing checkpoint-(\d+)$",
                                  120, after=started_at)
            step = int(writing.group(2))
            path = ckpt / f"checkpoint-{step}" / target
            end = deadline(60)
            while not (path.exists() and path.stat().st_size > 0):
                self.assertLess(time.monotonic(), end, f"{path} never appeared:\n{sv.tail()}")
                self.assertTrue(pid_alive(pid), f"the trainer exited before {path} appeared:\n{sv.tail()}")
                time.sleep(0.01)
            os.kill(pid, signal.SIGKILL)
            ended = sv.wait_event("attempt_ended", 60, lambda e: e["attempt"] == str(attempt))
            self.assertEqual(ended["outcome"], "failed", ended)
            complete = f"[hf] wrote checkpoint-{step}" in sv.text()[writing.end():]
            kills.append((attempt, step, target, complete))

        self.assert_exit(sv, 0, 300)
        log = sv.text()
        self.assertEqual(self.result_of(), D, f"the digest differs from the uninterrupted run's; kills: {kills}")

        # The invariant, over the whole log: every resume names a checkpoint whose last
        # write had finished ("[hf] wrote" after the last "[hf] writing" of that step).
        status = {}
        resumes = []
        for line in log.splitlines():
            m = re.match(r"\[hf\] (writing|wrote) checkpoint-(\d+)$", line)
            if m:
                status[int(m.group(2))] = m.group(1)
                continue
            for e in events(line, "trainer_started"):
                if e["resume"] != "none":
                    step = int(re.search(r"checkpoint-(\d+)$", e["resume"]).group(1))
                    self.assertEqual(status.get(step), "wrote",
                                     f"attempt {e['attempt']} resumed from {e['resume']}, which was "
                                     f"half-written; kills: {kills}\n{sv.tail(80)}")
                    resumes.append((int(e["attempt"]), step))

        half_written = [(a, s, t) for a, s, t, complete in kills if not complete]
        self.assertGreaterEqual(len(half_written), 2, f"too few kills landed mid-write: {kills}")
        rejected = {Path(e["path"]).name: e for e in events(log, "checkpoint_rejected")}
        for attempt, step, target in half_written:
            name = f"checkpoint-{step}"
            self.assertIn(name, rejected, f"half-written {name} (killed at {target}) was not rejected")
            moved = rejected[name].get("quarantined_to")
            self.assertTrue(moved and Path(moved).is_dir() and ckpt / ".spotvisor-quarantine" in Path(moved).parents,
                            f"{name} was not quarantined: {rejected[name]}")
            # The next attempt resumed from the previous complete checkpoint.
            self.assertIn((attempt + 1, step - 5), resumes, f"kills {kills}, resumes {resumes}")
        attempts = read_attempts(self.dir / "state")
        self.assertEqual([a.get("signal") for a in attempts[:len(KILL_AT)]], [signal.SIGKILL] * len(KILL_AT))
        self.assertEqual(attempts[-1].get("exit_code"), 0, attempts)


if __name__ == "__main__":
    unittest.main()
