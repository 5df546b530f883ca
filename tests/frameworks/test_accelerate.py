"""Hugging Face `accelerate` under spotvisor, with the real library (issue 22).

The example job (examples/accelerate: a seeded two-layer network, in-memory data, two CPU
processes with gloo under `accelerate launch --multi_gpu --num_processes 2`, saves through
`spotvisor_helper.accelerate.save_state`) runs under the real spotvisor with the mock AWS
metadata server.

- NOTICES times in one run, at a random moment while the ranks train, the mock announces a
  spot interruption. spotvisor (signals.target auto: `accelerate launch` is a launcher) must
  send SIGTERM to both workers, not the launcher; both ranks save the same `step-N` (each
  writes its random_states_<rank>.pkl into it) and exit; the launcher exits 0; spotvisor
  records `preempted`, judges step-N good (its drained validation), all inside the two-minute
  warning, and resumes from it. At the end the weights equal an uninterrupted run's (run
  beside it), bit for bit. Prints the save-on-notice rate and notice-to-saved p50/max.
- A SIGKILL of the whole trainer (launcher and workers) at a random moment while save_state
  writes a bigger model: spotvisor must resume from the previous good step, never from the
  killed one.

Run: SPOTVISOR_BINARY=build/spotvisor SPOTVISOR_E2E_TORCH_PYTHON=<the pinned venv's python> \
     python3 -m unittest -v tests.frameworks.test_accelerate
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
import time
import unittest
from pathlib import Path
from typing import Dict, List, Sequence

from tests.e2e.support import REPO, E2ECase
from tests.frameworks.harness import Notices, Reference, wait_until
from tests.e2e.torch_env import PYTHON

NOTICES = 20
STEPS = 900
EXAMPLE = REPO / "examples" / "accelerate" / "train.py"
ACCELERATE = str(Path(PYTHON).parent / "accelerate")
# Two CPU processes with gloo through torchrun's launcher (--cpu would start one); no
# accelerate config file is read (HF_HOME is the test's), so every choice is on the line.
LAUNCH = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]
# ~0.04 s a step, most of it sleeping (other work); a periodic save every 100 steps.
TRAINER_ARGS = ["--steps", str(STEPS), "--save-every", "100", "--step-sleep", "0.03"]
# The kill case: 4 M parameters (~50 MB a save with AdamW's state), a save every 10 steps.
KILL_ARGS = ["--steps", "100000", "--save-every", "10", "--step-sleep", "0.02", "--width", "262144"]


def job_text(name: str, endpoint: str, trainer_args: Sequence[str], hf_home: Path) -> str:
    j = json.dumps
    command = [*LAUNCH, str(EXAMPLE), "--checkpoint-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
               *trainer_args]
    return "\n".join([
        "job:",
        f"  name: {name}",
        f"  command: {j(command)}",
        '  resume_args: ["--resume-from", "{checkpoint}"]',
        "  workdir: .",
        f"  env: {j({'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'HF_HOME': str(hf_home)})}",
        "  result_file: ./result.txt",
        "provider:",
        "  kind: aws",
        f"  endpoint: {j(endpoint)}",
        "  poll_interval: 200ms",
        "  request_timeout: 2s",
        "  resume_after: 200ms",
        "signals: {on_notice: SIGTERM, checkpoint: SIGUSR1, grace: 100s}",
        'checkpoints: {dir: ./ckpt, pattern: "step-{step}", validate: full, keep: 0}',
        # Up to 6 kills on purpose (the kill test's tries): more than crash_loop's default 5.
        "restart: {max_restarts: 8, crash_loop: {failures: 8, window: 10m}, backoff: {initial: 100ms, max: 1s, jitter: 0}}",
        "telemetry: {state_dir: ./state, log_format: text}",
    ]) + "\n"


def start_reference(case: E2ECase) -> Reference:
    return Reference(case, [*LAUNCH, EXAMPLE, "--checkpoint-dir", "ckpt", "--result-file", "result.txt",
                            *TRAINER_ARGS], env={"HF_HOME": str(case.dir / "hf-reference")})


def tree(root: int) -> List[int]:
    """`root` and every live descendant, from /proc."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, walk = [], [root]
    while walk:
        pid = walk.pop()
        out.append(pid)
        walk.extend(children.get(pid, []))
    return out


class Accelerate(E2ECase):
    trainer_names = (str(EXAMPLE),)  # torch 2.x's workers outlive a SIGKILLed launcher

    def setUp(self) -> None:
        super().setUp()
        probe = subprocess.run([PYTHON, "-c", "import accelerate"], capture_output=True, text=True)
        self.assertEqual(probe.returncode, 0, f"{PYTHON} has no accelerate: {probe.stderr[-500:]}")
        self.assertTrue(os.access(ACCELERATE, os.X_OK), f"no {ACCELERATE} beside {PYTHON}")

    def test_every_notice_reaches_both_ranks_ends_with_a_good_checkpoint_and_the_run_is_exact(self):
        rng = random.Random(22)
        reference = start_reference(self)
        mock = self.mock("aws")
        job = self.dir / "job.yaml"
        job.write_text(job_text("frameworks-accelerate", mock.url, TRAINER_ARGS, self.dir / "hf"))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        run = Notices(self, sv, mock, label="accelerate", steps=STEPS)
        launcher_status = []
        for attempt in range(1, NOTICES + 1):
            start = run.started(attempt, ckpt / f"step-{run.last_step}")
            self.assertEqual(start["signal_target"], "workers", start)
            offset = len(sv.text())
            started = run.ranks_started("accelerate", offset)
            time.sleep(rng.uniform(0.2, 1.5))
            step = run.preempt(attempt)
            run.assert_both_ranks_saved("accelerate", offset, step, started)
            final = ckpt / f"step-{step}"
            self.assertTrue((final / "random_states_0.pkl").is_file() and (final / "random_states_1.pkl").is_file())
            # The launcher outlives its workers: held (SIGSTOP) while they save and exit, then
            # released. spotvisor releases it with SIGTERM+SIGCONT (fsm.cpp OnWorkersGone),
            # on which torchrun's agent inside accelerate exits 143 before it sees its workers'
            # exit codes; released with SIGCONT alone it would exit 0. Either way only after
            # every worker is gone.
            after = sv.text()[offset:]
            gone, exited = after.find("event=workers_gone"), after.find("event=trainer_exited")
            self.assertTrue(0 <= gone < exited, f"attempt {attempt}: the launcher exited before its workers")
            status = run.ended["status"]
            released = after.find("signal=SIGTERM+SIGCONT target=launcher")
            self.assertTrue(status == "exit code 0" or (status == "exit code 143" and gone < released < exited),
                            f"attempt {attempt}: launcher {status}")
            launcher_status.append(status)
            run.saved(step, (final / "spotvisor.manifest.json").stat().st_mtime)

        run.finish(reference,
                   f" (both ranks); the launcher after its workers: "
                   f"{', '.join(f'{n}x {st}' for st, n in sorted(collections.Counter(launcher_status).items()))}")
        self.assertFalse(list(ckpt.glob(".tmp-*")), "a temp directory was left behind")

    def test_a_kill_while_save_state_writes_is_never_resumed_from(self):
        rng = random.Random(23)
        mock = self.mock("aws")  # never preempts: the provider is just what every job has
        job = self.dir / "job.yaml"
        job.write_text(job_text("frameworks-accelerate-kill", mock.url, KILL_ARGS, self.dir / "hf"))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")
        kills, attempt, tries, killed_at = 0, 1, 0, 0.0
        while kills < 2:
            tries += 1
            self.assertLessEqual(tries, 6, f"never caught a save mid-write\n{sv.tail()}")
            start = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt))
            # After the first periodic save, the next one's temp directory: kill inside it.
            good = wait_until(self, lambda: sorted(ckpt.glob("step-*"), key=lambda p: int(p.name[5:])), 120)
            newest = int(good[-1].name[5:])
            temp = ckpt / f".tmp-step-{newest + 10}"
            # Made by this attempt (one that a kill left is older, and is replaced).
            wait_until(self, lambda: temp.exists() and temp.stat().st_mtime > killed_at, 60, poll=0.001)
            time.sleep(rng.uniform(0.0, 0.15))
            victims = tree(int(start["pid"]))
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            ended = sv.wait_event("attempt_ended", 60, lambda e: e.get("attempt") == str(attempt))
            # Taken once every victim is gone: a rank still writing into the temp directory
            # between our SIGKILLs made it look newer than a time taken before them, and the
            # next attempt was killed at its start for a save it had not begun.
            killed_at = time.time()
            self.assertNotEqual(ended["outcome"], "preempted", ended)
            attempt += 1
            nxt = sv.wait_event("trainer_started", 60, lambda e: e.get("attempt") == str(attempt))
            committed = sorted((int(p.name[5:]) for p in ckpt.glob("step-*")))
            if temp.exists() and committed[-1] < newest + 10:
                kills += 1  # caught mid-write: step newest+10 must not be the resume
                self.assertEqual(nxt["resume"], str(ckpt / f"step-{committed[-1]}"), (nxt, committed))
                self.assertNotEqual(nxt["resume"], str(ckpt / f"step-{newest + 10}"))
                listing = subprocess.run([self.binary, "checkpoints", "--config", str(job)], cwd=self.dir,
                                         capture_output=True, text=True, timeout=60)
                said = listing.stdout + listing.stderr
                listed = rf"temp entr[^\n]*never resumed from[^\n]*\n(\s+\S+\n)*?\s+{re.escape(str(temp))}\n"
                self.assertRegex(said, listed, said)
                self.assertNotIn(f"step-{newest + 10} ", listing.stdout, said)
        # The job goes on from there and saves the killed step again, over the stale temp dir.
        again = ckpt / f"step-{newest + 10}"
        wait_until(self, again.exists, 120)
        sv.signal(signal.SIGTERM)
        sv.wait(180)


if __name__ == "__main__":
    unittest.main()
