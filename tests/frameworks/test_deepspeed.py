"""DeepSpeed's launcher under spotvisor, with the real library (issue 22).

The example job (examples/deepspeed: a seeded two-layer network, in-memory data, a
`deepspeed.initialize` engine with ZeRO stage 1 in fp32, two CPU processes with gloo under
`deepspeed --num_gpus 2`, saves with `engine.save_checkpoint(dir, tag="global_stepN")`) runs
under the real spotvisor with the mock AWS metadata server.

- NOTICES times in one run, at a random moment while the ranks train, the mock announces a
  spot interruption. spotvisor (signals.target auto: `deepspeed` is a launcher, and so is the
  `deepspeed.launcher.launch` it starts) must send SIGTERM to both workers, not the
  launchers; both ranks save the same `global_stepN` (each its ZeRO optimizer shard, rank 0
  the model states and `latest`) and exit 0; the launchers are held (SIGSTOP) until the
  workers are gone; spotvisor records `preempted`, judges global_stepN good (its drained
  validation), all inside the two-minute warning, and resumes from it. At the end the
  weights equal an uninterrupted run's (run beside it), bit for bit. Prints the
  save-on-notice rate and notice-to-saved p50/max.
- A SIGKILL of the whole trainer (launchers and workers) at a random moment while
  save_checkpoint writes a bigger model: spotvisor must never resume from a checkpoint that
  is not whole (DeepSpeed's rank 0 writes `latest` without waiting for rank 1's shard, so
  `latest` alone does not prove a save finished).

The trainers run with SPOTVISOR_DEEPSPEED_PYTHON (scripts/layered-env.sh deepspeed-env; ctest
passes it). DeepSpeed compiles its CPU shared-memory op on first use (about two minutes, cached in
~/.cache/torch_extensions): setUpClass does that once, so no notice lands in it.

Run: SPOTVISOR_BINARY=build/spotvisor SPOTVISOR_DEEPSPEED_PYTHON="$(scripts/layered-env.sh deepspeed-env | tail -n 1)" \
     python3 -m unittest -v tests.frameworks.test_deepspeed
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import List, Optional, Sequence

from tests.e2e.processes import clean_env
from tests.e2e.support import REPO, E2ECase
from tests.frameworks.harness import Notices, Reference, wait_until
from tests.frameworks.test_accelerate import tree

PYTHON = os.environ.get("SPOTVISOR_DEEPSPEED_PYTHON", "")
NOTICES = 5
STEPS = 500
EXAMPLE = REPO / "examples" / "deepspeed" / "train.py"
# The console script beside the environment's python: spotvisor knows it by its name.
DEEPSPEED = str(Path(PYTHON).parent / "deepspeed") if PYTHON else ""
# ~0.04 s a step, most of it sleeping (other work); a periodic save every 100 steps.
TRAINER_ARGS = ["--steps", str(STEPS), "--save-every", "100", "--step-sleep", "0.03"]
# The kill case: 4 M parameters (~50 MB a save with AdamW's state), a save every 10 steps.
KILL_ARGS = ["--steps", "100000", "--save-every", "10", "--step-sleep", "0.02", "--width", "262144"]
# DeepSpeed picks its CPU accelerator without a GPU; said, so a GPU machine runs the same.
ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "DS_ACCELERATOR": "cpu"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(port: int) -> List[str]:
    return [DEEPSPEED, "--num_gpus", "2", "--master_port", str(port)]


def job_text(name: str, endpoint: str, trainer_args: Sequence[str], backoff: str = "100ms",
             backoff_max: str = "1s") -> str:
    j = json.dumps
    command = [*launch(free_port()), str(EXAMPLE), "--checkpoint-dir", "{checkpoint_dir}",
               "--result-file", "{result_file}", *trainer_args]
    return "\n".join([
        "job:",
        f"  name: {name}",
        f"  command: {j(command)}",
        '  resume_args: ["--resume-from", "{checkpoint}"]',
        "  workdir: .",
        f"  env: {j(ENV)}",
        "  result_file: ./result.txt",
        "provider:",
        "  kind: aws",
        f"  endpoint: {j(endpoint)}",
        "  poll_interval: 200ms",
        "  request_timeout: 2s",
        "  resume_after: 200ms",
        "signals: {on_notice: SIGTERM, checkpoint: SIGUSR1, grace: 100s}",
        'checkpoints: {dir: ./ckpt, pattern: "global_step{step}", validate: full, keep: 0}',
        f"restart: {{max_restarts: 8, backoff: {{initial: {backoff}, max: {backoff_max}, jitter: 0}}}}",
        "telemetry: {state_dir: ./state, log_format: text}",
    ]) + "\n"


def start_reference(case: E2ECase) -> Reference:
    return Reference(case, [*launch(free_port()), EXAMPLE, "--checkpoint-dir", "ckpt", "--result-file", "result.txt",
                            *TRAINER_ARGS], env=ENV)


def whole(step_dir: Path) -> Optional[str]:
    """None when every file of a DeepSpeed checkpoint loads with torch and `latest` names it
    or a later step; else what is wrong. Independent of spotvisor's own validation."""
    latest = step_dir.parent / "latest"
    named = latest.read_text().strip() if latest.exists() else ""
    if not named.startswith("global_step") or int(named[len("global_step"):]) < int(step_dir.name[len("global_step"):]):
        return f"latest names {named!r}"
    code = ("import sys, torch\n"
            "for f in sys.argv[1:]: torch.load(f, map_location='cpu', weights_only=False)\n")
    files = sorted(str(f) for f in step_dir.glob("*.pt"))
    if len(files) != 3:
        return f"{len(files)} files: {files}"
    probe = subprocess.run([PYTHON, "-c", code, *files], capture_output=True, text=True, timeout=300)
    return None if probe.returncode == 0 else probe.stderr[-300:]


class DeepSpeed(E2ECase):
    trainer_names = (str(EXAMPLE),)  # a SIGKILLed launcher leaves its workers behind
    needs_torch = False  # not Debian's torch: SPOTVISOR_DEEPSPEED_PYTHON's, checked below

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        if not PYTHON:
            raise unittest.SkipTest("set SPOTVISOR_DEEPSPEED_PYTHON (scripts/layered-env.sh deepspeed-env; ctest does)")
        if not os.access(DEEPSPEED, os.X_OK):
            raise AssertionError(f"no deepspeed console script beside {PYTHON}")
        # DeepSpeed's CPU accelerator compiles its shared-memory op the first time a process
        # group starts (minutes; then cached): once here, so no notice lands in it.
        started = time.monotonic()
        warm = subprocess.run(
            [PYTHON, "-c", "from deepspeed.accelerator import get_accelerator\n"
                           "get_accelerator().create_op_builder('ShareMemCommBuilder').load()"],
            env=clean_env(ENV), capture_output=True, text=True, timeout=600)
        if warm.returncode != 0:
            raise AssertionError(f"DeepSpeed's shm op did not build:\n{warm.stdout[-2000:]}{warm.stderr[-2000:]}")
        print(f"\n[deepspeed] shm op ready in {time.monotonic() - started:.1f}s", file=sys.stderr)

    def test_every_notice_reaches_both_ranks_ends_with_a_good_checkpoint_and_the_run_is_exact(self):
        rng = random.Random(22)
        reference = start_reference(self)
        mock = self.mock("aws")
        job = self.dir / "job.yaml"
        job.write_text(job_text("frameworks-deepspeed", mock.url, TRAINER_ARGS))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        run = Notices(self, sv, mock, label="deepspeed", steps=STEPS)
        launcher_status = []
        for attempt in range(1, NOTICES + 1):
            start = run.started(attempt, ckpt / f"global_step{run.last_step}")
            self.assertEqual(start["signal_target"], "workers", start)
            offset = len(sv.text())
            started = run.ranks_started("deepspeed", offset)
            time.sleep(rng.uniform(0.2, 2.5))
            step = run.preempt(attempt)
            run.assert_both_ranks_saved("deepspeed", offset, step, started)
            final = ckpt / f"global_step{step}"
            self.assertEqual(sorted(p.name for p in final.iterdir()),
                             ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                              "zero_pp_rank_1_mp_rank_00_optim_states.pt"])
            self.assertEqual((ckpt / "latest").read_text().strip(), final.name)
            # The launchers outlive their workers: held (SIGSTOP) while the workers save and
            # exit, then released; the launcher exits only after every worker is gone.
            after = sv.text()[offset:]
            gone, exited = after.find("event=workers_gone"), after.find("event=trainer_exited")
            self.assertTrue(0 <= gone < exited, f"attempt {attempt}: the launcher exited before its workers")
            # Both launchers (the `deepspeed` runner and the deepspeed.launcher.launch it starts).
            held = re.search(r"signal=SIGSTOP target=launcher pid=\d+ processes=2 ", after)
            self.assertTrue(held and held.start() < gone, f"attempt {attempt}: the launchers were not held\n{after}")
            launcher_status.append(run.ended["status"])
            run.saved(step, max(p.stat().st_mtime for p in [*final.iterdir(), ckpt / "latest"]))

        run.finish(reference,
                   f" (both ranks); the launcher after its workers: "
                   f"{', '.join(f'{n}x {st}' for st, n in sorted(collections.Counter(launcher_status).items()))}")

    def test_a_kill_while_save_checkpoint_writes_is_never_resumed_from(self):
        rng = random.Random(23)
        mock = self.mock("aws")  # never preempts: the provider is just what every job has
        job = self.dir / "job.yaml"
        # A restart 2 s after the kill: time to copy what the kill left before spotvisor looks.
        job.write_text(job_text("frameworks-deepspeed-kill", mock.url, KILL_ARGS, backoff="2s", backoff_max="2s"))
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")
        steps = lambda: sorted(int(p.name[len("global_step"):]) for p in ckpt.glob("global_step*"))  # noqa: E731
        caught, attempt, tries, killed_at = 0, 1, 0, 0.0
        while caught < 1:
            tries += 1
            self.assertLessEqual(tries, 5, f"never caught a save mid-write\n{sv.tail()}")
            start = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt))
            # After a save of this attempt, the next one's directory: kill while it is written.
            wait_until(self, lambda: (ckpt / "latest").exists() and (ckpt / "latest").stat().st_mtime > killed_at, 120)
            newest = int((ckpt / "latest").read_text().strip()[len("global_step"):])
            target = ckpt / f"global_step{newest + 10}"
            wait_until(self, lambda: target.exists() and target.stat().st_mtime > killed_at, 60, poll=0.001)
            time.sleep(rng.uniform(0.0, 0.1))  # a save takes 0.1-0.2 s
            killed_at = time.time()
            for pid in tree(int(start["pid"])):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            ended = sv.wait_event("attempt_ended", 60, lambda e: e.get("attempt") == str(attempt))
            self.assertNotEqual(ended["outcome"], "preempted", ended)
            # What the kill left, copied before spotvisor validates (and quarantines) it.
            snapshot = self.dir / f"snapshot-{tries}" / "ckpt"
            snapshot.mkdir(parents=True)
            shutil.copy2(ckpt / "latest", snapshot / "latest")
            shutil.copytree(target, snapshot / target.name)
            attempt += 1
            nxt = sv.wait_event("trainer_started", 60, lambda e: e.get("attempt") == str(attempt))
            wrong = whole(snapshot / target.name)
            resumed = nxt.get("resume", "")
            if wrong:
                caught += 1  # cut mid-write: never the resume; the newest whole one is
                self.assertNotEqual(resumed, str(target), f"resumed from a cut checkpoint ({wrong})")
                self.assertRegex(resumed, r"/global_step\d+$", (nxt, steps(), wrong))
                self.assertLess(int(resumed.rsplit("global_step", 1)[1]), newest + 10, (nxt, steps(), wrong))
                self.assertIsNone(whole(Path(resumed)), f"resumed from {resumed}, not a whole checkpoint")
            else:
                self.assertEqual(resumed, str(target), "the killed save had finished: resume from it")
        print(f"\n[deepspeed] kill mid-save: caught a cut global_step{newest + 10} ({wrong.strip()[-120:]}) "
              f"in {tries} kill(s); resumed from {Path(resumed).name}", file=sys.stderr)
        # The job goes on from there and saves the killed step again.
        wait_until(self, lambda: (ckpt / "latest").read_text().strip() == target.name and not whole(target), 120)
        sv.signal(signal.SIGTERM)
        sv.wait(180)


if __name__ == "__main__":
    unittest.main()
