"""Hugging Face `transformers.Trainer` under spotvisor, with the real library (issue 22).

The example job (examples/hf_trainer: a tiny GPT-2 from a config, no download, on the CPU,
with `spotvisor_helper.hf.SpotvisorCallback`) runs under the real spotvisor with the mock
AWS metadata server. NOTICES times in one run: at a random moment of an attempt (data
loading takes most of each step here, then the step, now and then a periodic save) the
mock announces a spot interruption; the attempt must end with a new `checkpoint-N` that
spotvisor judged good (its drained validation) before the trainer exited, inside the
two-minute warning. The notice is then withdrawn and spotvisor resumes from it. At the end
the weights equal an uninterrupted run's, bit for bit. Prints the save-on-notice rate and
the time from the notice to the saved checkpoint (p50, max).

Then: a SIGKILL while the Trainer writes `checkpoint-N` (it writes in place, trainer_state.json
last) leaves a directory spotvisor rejects and never resumes from; and under torchrun with two
processes (gloo) a notice makes both ranks save the same step, and the resumed run ends with
the uninterrupted two-process run's weights.

Run: SPOTVISOR_BINARY=build/spotvisor SPOTVISOR_E2E_TORCH_PYTHON=<the pinned venv's python> \
     python3 -m unittest -v tests.frameworks.test_hf  (or one class: ...test_hf.HfTwoRanks)
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import time
import unittest
from pathlib import Path

from tests.e2e.support import REPO, E2ECase
from tests.e2e.torch_env import PYTHON, TORCHRUN
from tests.frameworks.harness import Notices, Reference

NOTICES = 20
STEPS = 600
EXAMPLE = REPO / "examples" / "hf_trainer" / "train.py"
# ~0.25 s a step, most of it data loading; a periodic save every 50 steps.
TRAINER_ARGS = ["--steps", str(STEPS), "--save-steps", "50", "--load-sleep", "0.05"]


def job_text(endpoint: str, trainer_args=TRAINER_ARGS, launcher=(PYTHON,)) -> str:
    j = json.dumps
    command = [*launcher, str(EXAMPLE), "--output-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
               *trainer_args]
    return "\n".join([
        "job:",
        "  name: frameworks-hf",
        f"  command: {j(command)}",
        '  resume_args: ["--resume_from_checkpoint", "{checkpoint}"]',
        "  workdir: .",
        f"  env: {j({'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'})}",
        "  result_file: ./result.txt",
        "provider:",
        "  kind: aws",
        f"  endpoint: {j(endpoint)}",
        "  poll_interval: 200ms",
        "  request_timeout: 2s",
        "  resume_after: 1s",
        "signals: {on_notice: SIGTERM, checkpoint: SIGUSR1, grace: 100s}",
        'checkpoints: {dir: ./ckpt, pattern: "checkpoint-{step}", validate: full, keep: 0}',
        "restart: {max_restarts: 12, backoff: {initial: 100ms, max: 1s, jitter: 0}, "
        "crash_loop: {failures: 20, window: 10m}}",
        "telemetry: {state_dir: ./state, log_format: text}",
    ]) + "\n"


def start_reference(case: E2ECase, trainer_args=TRAINER_ARGS, launcher=(PYTHON,)) -> Reference:
    return Reference(case, [*launcher, EXAMPLE, "--output-dir", "ckpt", "--result-file", "result.txt", *trainer_args])


class HfNotices(E2ECase):

    def test_every_notice_ends_with_a_good_checkpoint_and_the_run_is_exact(self):
        probe = subprocess.run([PYTHON, "-c", "import transformers"], capture_output=True, text=True)
        self.assertEqual(probe.returncode, 0, f"{PYTHON} has no transformers: {probe.stderr[-500:]}")
        rng = random.Random(22)
        reference = start_reference(self)
        mock = self.mock("aws")
        job = self.dir / "job.yaml"
        job.write_text(job_text(mock.url))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        run = Notices(self, sv, mock, label="hf", steps=STEPS)
        training = []  # per notice: False when it came while Python imported transformers
        for attempt in range(1, NOTICES + 1):
            run.started(attempt, ckpt / f"checkpoint-{run.last_step}")
            # A random moment of the attempt: while transformers loads (the flags are set
            # before it: the save comes at the first step), while it trains, loads data, saves.
            time.sleep(rng.uniform(1.5, 8.0))
            training.append(sv.text().count("[hf] start resume=") >= attempt)  # the Trainer is built
            step = run.preempt(attempt)
            state = ckpt / f"checkpoint-{step}" / "trainer_state.json"
            self.assertEqual(json.loads(state.read_text())["global_step"], step)
            run.saved(step, state.stat().st_mtime)

        run.finish(reference)
        saved_after = run.saved_after
        for name, group in (("while training", [t for t, x in zip(saved_after, training) if x]),
                            ("during the imports (saved at the first step)",
                             [t for t, x in zip(saved_after, training) if not x])):
            if group:
                print(f"[hf]   {len(group)} {name}: p50 {statistics.median(group):.2f}s max {max(group):.2f}s")


class HfKilledWhileSaving(E2ECase):

    def test_a_kill_while_the_trainer_writes_a_checkpoint_is_never_resumed_from(self):
        # A save at every step, so the Trainer writes most of the time; the test watches for a
        # checkpoint-N without trainer_state.json (being written) and kills the trainer then.
        steps, kills = 200, 6
        mock = self.mock("aws")  # never preempts: the kills are the disruption
        job = self.dir / "job.yaml"
        job.write_text(job_text(mock.url, ["--steps", str(steps), "--save-steps", "1"]))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")
        rng = random.Random(2201)
        partial_seen = set()
        for attempt in range(1, kills + 1):
            pid = self.trainer_pid(sv, attempt, 180)
            start = sv.wait_event("trainer_started", 10, lambda e: e.get("attempt") == str(attempt))
            self.assert_resumed_from_complete(start, ckpt)
            resumed = start.get("resume", "none")
            at = int(Path(resumed).name.split("-")[1]) if resumed != "none" else 0
            # A few complete saves first: each attempt makes progress, as a real run would.
            victim = self.wait_for_a_save_in_progress(ckpt, since=time.time(), min_step=at + 3)
            time.sleep(rng.uniform(0.0, 0.004))
            os.kill(pid, signal.SIGKILL)
            sv.wait_event("attempt_ended", 60, lambda e: e.get("attempt") == str(attempt))
            if victim is not None and not (victim / "trainer_state.json").exists():
                partial_seen.add(victim.name)
        start = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(kills + 1))
        self.assert_resumed_from_complete(start, ckpt)
        self.assert_exit(sv, 0, 600)
        rejected = {Path(e["path"]).name for e in sv.events("checkpoint_rejected")}
        self.assertTrue(partial_seen, "no kill landed while a checkpoint was being written: the test proved nothing")
        self.assertTrue(partial_seen <= rejected,
                        f"half-written {sorted(partial_seen)}, rejected {sorted(rejected)}\n{sv.tail()}")
        print(f"\n[hf] killed {kills} times while saving: {len(partial_seen)} half-written checkpoints, "
              f"every one rejected, every resume from a complete one")

    def wait_for_a_save_in_progress(self, ckpt: Path, since: float, min_step: int, timeout: float = 120):
        """The checkpoint-N directory (N >= min_step) the Trainer is writing now (no
        trainer_state.json yet)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                dirs = [d for d in ckpt.iterdir()
                        if d.name.startswith("checkpoint-") and int(d.name.split("-")[1]) >= min_step]
            except FileNotFoundError:
                dirs = []
            for d in dirs:
                try:
                    fresh = d.stat().st_mtime >= since
                except FileNotFoundError:
                    continue
                if fresh and not (d / "trainer_state.json").exists():
                    return d
            time.sleep(0.001)
        return None

    def assert_resumed_from_complete(self, start: dict, ckpt: Path) -> None:
        resume = start.get("resume", "none")
        if resume == "none":
            return
        state = Path(resume) / "trainer_state.json"
        self.assertTrue(state.exists(), f"resumed from {resume}, which has no trainer_state.json")
        self.assertEqual(json.loads(state.read_text())["global_step"], int(Path(resume).name.split("-")[1]))


class HfTwoRanks(E2ECase):
    trainer_names = (str(EXAMPLE),)  # torchrun's workers (sessions of their own)

    def test_two_processes_save_the_same_step_and_resume_exactly(self):
        probe = subprocess.run([PYTHON, "-c", "import transformers"], capture_output=True, text=True)
        self.assertEqual(probe.returncode, 0, f"{PYTHON} has no transformers: {probe.stderr[-500:]}")
        args = ["--steps", "160", "--save-steps", "1000", "--load-sleep", "0.02"]
        reference = start_reference(self, args, TORCHRUN)
        mock = self.mock("aws")
        job = self.dir / "job.yaml"
        job.write_text(job_text(mock.url, args, TORCHRUN))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")
        sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == "1")
        # Both ranks have made their Trainer (a notice while torchrun still starts them stops
        # the launcher alone: nothing to save yet); a few seconds of training after that.
        end = time.monotonic() + 180
        while sv.text().count("[hf] start resume=None") < 2:
            self.assertLess(time.monotonic(), end, f"the two ranks never started\n{sv.tail()}")
            time.sleep(0.2)
        time.sleep(4)
        mock.preempt()
        # The launcher is paused (SIGSTOP, so it neither restarts nor kills its workers), then
        # the workers get the stop signal.
        sent = sv.wait_event("signal_sent", 60, lambda e: e.get("target") == "workers")
        self.assertEqual(len(sent.get("workers", "").split(",")), 2, f"both ranks signalled: {sent}")
        ended = sv.wait_event("attempt_ended", 120, lambda e: e.get("attempt") == "1")
        self.assertEqual(ended["outcome"], "preempted", f"{ended}\n{sv.tail()}")
        drained = sv.wait_event("drained", 120, lambda e: e.get("step", "none").isdigit())
        step = int(drained["step"])
        saved = ckpt / f"checkpoint-{step}"
        self.assertEqual(sorted(p.name for p in saved.glob("rng_state_*.pth")),
                         ["rng_state_0.pth", "rng_state_1.pth"], "each rank saved its RNG state at that step")
        self.assertEqual(json.loads((saved / "trainer_state.json").read_text())["global_step"], step)
        self.assertEqual(sorted(d.name for d in ckpt.iterdir() if d.name.startswith("checkpoint-")),
                         [saved.name], "one step saved, the same on both ranks")
        mock.clear()
        start = sv.wait_event("trainer_started", 120, lambda e: e.get("attempt") == "2")
        self.assertEqual(start.get("resume"), str(saved))
        self.assert_exit(sv, 0, 600)
        self.assertEqual(self.result_of(), reference.result(),
                         "two ranks, preempted once: not the uninterrupted run's weights")


if __name__ == "__main__":
    unittest.main()
