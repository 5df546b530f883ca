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

Run: SPOTVISOR_BINARY=build/spotvisor SPOTVISOR_E2E_TORCH_PYTHON=<the pinned venv's python> \
     python3 -m unittest -v tests.frameworks.test_hf
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import time
import unittest
from pathlib import Path

from tests.e2e.support import REPO, E2ECase, clean_env, read_attempts
from tests.e2e.torch_env import PYTHON

NOTICES = 20
STEPS = 600
EXAMPLE = REPO / "examples" / "hf_trainer" / "train.py"
# ~0.25 s a step, most of it data loading; a periodic save every 50 steps.
TRAINER_ARGS = ["--steps", str(STEPS), "--save-steps", "50", "--load-sleep", "0.05"]


def job_text(endpoint: str) -> str:
    j = json.dumps
    return "\n".join([
        "job:",
        "  name: frameworks-hf",
        f"  command: {j([PYTHON, str(EXAMPLE), '--output-dir', '{checkpoint_dir}', '--result-file', '{result_file}', *TRAINER_ARGS])}",
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
        "restart: {max_restarts: 5, backoff: {initial: 100ms, max: 1s, jitter: 0}}",
        "telemetry: {state_dir: ./state, log_format: text}",
    ]) + "\n"


def start_reference(workdir: Path) -> subprocess.Popen:
    """The uninterrupted run, without spotvisor, beside the test's (it mostly sleeps)."""
    return subprocess.Popen([PYTHON, str(EXAMPLE), "--output-dir", str(workdir / "reference-ckpt"),
                             "--result-file", str(workdir / "reference.txt"), *TRAINER_ARGS],
                            env=clean_env({"OMP_NUM_THREADS": "1"}), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class HfTrainer(E2ECase):

    def test_every_notice_ends_with_a_good_checkpoint_and_the_run_is_exact(self):
        probe = subprocess.run([PYTHON, "-c", "import transformers"], capture_output=True, text=True)
        self.assertEqual(probe.returncode, 0, f"{PYTHON} has no transformers: {probe.stderr[-500:]}")
        rng = random.Random(22)
        reference = start_reference(self.dir)
        self.addCleanup(reference.kill)
        mock = self.mock("aws")
        job = self.dir / "job.yaml"
        job.write_text(job_text(mock.url))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        saved_after = []  # seconds from the notice to trainer_state.json of its checkpoint
        last_step = 0
        for attempt in range(1, NOTICES + 1):
            start = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt))
            resume = start.get("resume", "none")
            if attempt > 1:
                self.assertEqual(resume, str(ckpt / f"checkpoint-{last_step}"), "resumed from the notice's save")
            # A random moment of the attempt, mostly while it trains (imports take ~4 s).
            time.sleep(4.5 + rng.uniform(0.0, 3.0))
            noticed = time.time()
            mock.preempt()
            ended = sv.wait_event("attempt_ended", 120, lambda e: e.get("attempt") == str(attempt))
            self.assertEqual(ended["outcome"], "preempted", f"attempt {attempt}: {ended}\n{sv.tail()}")
            drained = sv.wait_event("drained", 120,
                                    lambda e: e.get("step", "none").isdigit() and int(e["step"]) > last_step)
            step = int(drained["step"])
            self.assertGreater(step, last_step, f"attempt {attempt}: no new checkpoint\n{sv.tail()}")
            self.assertLess(step, STEPS, "the run ended before the notice: make it longer")
            state = ckpt / f"checkpoint-{step}" / "trainer_state.json"
            self.assertEqual(json.loads(state.read_text())["global_step"], step)
            saved_after.append(state.stat().st_mtime - noticed)
            self.assertLess(saved_after[-1], 120, "saved outside the two-minute warning")
            last_step = step
            mock.clear()

        self.assert_exit(sv, 0, 600)
        attempts = read_attempts(self.dir / "state")
        self.assertEqual(sum(a["outcome"] == "preempted" for a in attempts), NOTICES)
        self.assertFalse([a for a in attempts if a["outcome"] == "failed"], attempts)
        self.assertEqual(reference.wait(600), 0, "the uninterrupted run failed")
        self.assertEqual(self.result_of(), (self.dir / "reference.txt").read_text().strip(),
                         f"resumed {NOTICES} times: not the uninterrupted run's weights")
        print(f"\n[hf] save on notice: {len(saved_after)}/{NOTICES} saved and judged good in the window; "
              f"notice to saved checkpoint p50 {statistics.median(saved_after):.2f}s "
              f"max {max(saved_after):.2f}s (mock poll interval 200ms)")


if __name__ == "__main__":
    unittest.main()
