"""PyTorch Lightning under spotvisor, with the real `lightning` package (issue 22).

The example job (examples/lightning: a tiny MLP on in-memory data, on the CPU, with
`spotvisor_helper.lightning.SpotvisorCallback` and `ResumableDataLoader`) runs under the real
spotvisor binary:

- NOTICES spot interruptions from the mock AWS metadata server, each at a random moment of an
  attempt (while Lightning sets up, or while it trains: data loading takes most of each step,
  now and then ModelCheckpoint saves). Every attempt must end with a new `epoch=E-step=S.ckpt`
  that spotvisor judged good (its drained validation) before the trainer exited, inside the
  two-minute warning; spotvisor resumes from it (`--ckpt_path`). At the end the weights equal
  an uninterrupted run's, bit for bit. Prints the rate and the notice-to-saved time (p50, max).
- SIGKILL of the trainer at a random moment while Lightning writes a checkpoint, with $TMPDIR
  on another file system than the checkpoints (tmpfs), where Lightning's `_atomic_save`
  copies into the final name: spotvisor must reject (and quarantine) the cut file exactly when
  torch.load cannot read a copy of it, leave no bad checkpoint where it could be resumed from
  (`spotvisor checkpoints`), and resume the next attempt from the newest good one. A kill inside
  SpotvisorCallback's save leaves only a temp name.
- torchrun with two processes (DDP on gloo): a notice makes both ranks save the same step and
  stop; spotvisor resumes, the job exits 0, and the weights equal an uninterrupted DDP run's.

Run: SPOTVISOR_BINARY=build/spotvisor SPOTVISOR_E2E_TORCH_PYTHON=<the pinned venv's python> \
     python3 -m unittest -v tests.frameworks.test_lightning
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tests.e2e.support import REPO, E2ECase, NeedsTorchrun, clean_env, deadline, pid_alive
from tests.e2e.torch_env import PYTHON, TORCHRUN
from tests.frameworks.harness import Notices, Reference

EXAMPLE = REPO / "examples" / "lightning" / "train.py"
PATTERN = "epoch=*-step={step}.ckpt"
NAME = re.compile(r"epoch=\d+-step=(\d+)\.ckpt")

NOTICES = 20
STEPS = 800
# ~35 ms a step, most of it data loading (8 samples x 4 ms); ModelCheckpoint every 100 steps.
TRAINER_ARGS = ["--steps", str(STEPS), "--save-every", "100", "--load-sleep", "0.004"]

KILLS = 4
# A 216 MB checkpoint (1M hidden units, Adam): Lightning's copy from $TMPDIR takes ~0.1 s.
WIDE_ARGS = ["--steps", "100000", "--save-every", "4", "--width", "1000000"]

DDP_STEPS = 300
DDP_ARGS = ["--steps", str(DDP_STEPS), "--save-every", "100", "--load-sleep", "0.004"]


def job_text(command: Sequence[str], *, endpoint: Optional[str], env: Dict[str, str],
             max_restarts: int = 5, keep: int = 0) -> str:
    j = json.dumps
    lines = [
        "job:",
        "  name: frameworks-lightning",
        f"  command: {j([str(c) for c in command])}",
        '  resume_args: ["--ckpt_path", "{checkpoint}"]',
        "  workdir: .",
        f"  env: {j({'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', **env})}",
        "  result_file: ./result.txt",
        "provider:",
    ]
    if endpoint:
        lines += ["  kind: aws", f"  endpoint: {j(endpoint)}", "  poll_interval: 200ms",
                  "  request_timeout: 2s", "  resume_after: 300ms"]
    else:
        lines += ["  kind: none"]
    lines += [
        "signals: {on_notice: SIGTERM, checkpoint: SIGUSR1, grace: 100s}",
        f'checkpoints: {{dir: ./ckpt, pattern: "{PATTERN}", validate: full, keep: {keep}}}',
        f"restart: {{max_restarts: {max_restarts}, backoff: {{initial: 100ms, max: 1s, jitter: 0}},"
        f" crash_loop: {{failures: {max_restarts + 1}, window: 10m}}}}",
        "telemetry: {state_dir: ./state, log_format: text}",
    ]
    return "\n".join(lines) + "\n"


def trainer_args(extra: Sequence[str]) -> List[str]:
    return ["--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}", *extra]


def checkpoint_of(ckpt: Path, step: int) -> Path:
    """The `epoch=E-step=<step>.ckpt` in `ckpt` (one per step; ModelCheckpoint's `-v1`
    copies of a step saved twice do not match the pattern)."""
    found = sorted(ckpt.glob(f"epoch=*-step={step}.ckpt"))
    assert len(found) == 1, f"{ckpt}: step {step}: {found}"
    return found[0]


class LightningCase(E2ECase):
    trainer_names = (str(EXAMPLE),)  # torchrun's workers (sessions of their own)

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        probe = subprocess.run([PYTHON, "-c", "import lightning"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise AssertionError(f"{PYTHON} has no lightning (scripts/python-env.sh): {probe.stderr[-500:]}")

    def write_job(self, command: Sequence[str], *, endpoint: Optional[str] = None,
                  env: Optional[Dict[str, str]] = None, max_restarts: int = 5, keep: int = 0) -> Path:
        job = self.dir / "job.yaml"
        job.write_text(job_text(command, endpoint=endpoint, env=env or {}, max_restarts=max_restarts, keep=keep))
        return job


class Lightning(LightningCase):

    def test_every_notice_ends_with_a_good_checkpoint_and_the_run_is_exact(self):
        rng = random.Random(22)
        reference = Reference(self, [PYTHON, EXAMPLE, "--ckpt-dir", "ckpt", "--result-file", "result.txt",
                                          *TRAINER_ARGS])
        mock = self.mock("aws")
        job = self.write_job([PYTHON, EXAMPLE, *trainer_args(TRAINER_ARGS)], endpoint=mock.url)
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        run = Notices(self, sv, mock, label="lightning", steps=STEPS)
        for attempt in range(1, NOTICES + 1):
            run.started(attempt, checkpoint_of(ckpt, run.last_step) if attempt > 1 else None)
            began = len(sv.text())
            sv.wait_for(r"^\[lightning\] rank=0 start", 120, after=began)
            # A random moment: Lightning still setting up (~0.5 s after this line), or training.
            time.sleep(rng.uniform(0.1, 1.6))
            step = run.preempt(attempt)
            self.assertRegex(sv.text()[began:], rf"\[lightning\] rank=0 stopped at step={step}\n",
                             "the trainer returned from fit() at the saved step")
            run.saved(step, checkpoint_of(ckpt, step).stat().st_mtime)

        run.started(NOTICES + 1, checkpoint_of(ckpt, run.last_step))
        run.finish(reference)


def verdicts(binary: str, job: Path) -> Dict[str, dict]:
    """`spotvisor checkpoints --json`, by file name."""
    out = subprocess.run([binary, "checkpoints", "--config", str(job), "--json"], env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    return {row["name"]: row for row in json.loads(out.stdout)}


class LightningKilledMidSave(LightningCase):

    def test_a_kill_while_lightning_writes_leaves_nothing_resumable(self):
        rng = random.Random(7)
        tmpdir = Path(tempfile.mkdtemp(prefix="spotvisor-lightning-", dir="/dev/shm"))
        self.addCleanup(shutil.rmtree, tmpdir, True)
        self.assertNotEqual(os.stat(tmpdir).st_dev, os.stat(self.dir).st_dev, "$TMPDIR must be another file system")
        job = self.write_job([PYTHON, EXAMPLE, *trainer_args(WIDE_ARGS)], env={"TMPDIR": str(tmpdir)},
                             max_restarts=KILLS + 2, keep=3)  # 216 MB each
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        victims = []  # (which save was killed, its file, rejected by spotvisor, a copy taken then)
        resumes = []  # what each attempt after a kill resumed from
        (self.dir / "victims").mkdir()
        for attempt in range(1, KILLS + 2):
            start = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt))
            if attempt > 1:
                # spotvisor has chosen (and moved a rejected file to .spotvisor-quarantine/);
                # the new trainer is still importing, so the directory is as it chose from.
                victim = victims[-1][1]
                rejected = [e for e in sv.events("checkpoint_rejected") if e.get("path") == str(victim)]
                copy = self.dir / "victims" / f"{attempt - 1}-{victim.name}"
                shutil.copyfile(ckpt / ".spotvisor-quarantine" / victim.name if rejected else victim, copy)
                victims[-1] += (bool(rejected), copy)
                table = verdicts(self.binary, job)
                self.assertTrue(all(r["good"] for r in table.values()), f"a bad checkpoint left in place: {table}")
                newest = max(table.values(), key=lambda r: r["step"])["path"] if table else "none"
                self.assertEqual(start.get("resume", "none"), newest, f"not the newest good checkpoint: {table}")
                if victims[-1][0] == "ModelCheckpoint":
                    self.assertEqual(newest == str(victim), not rejected, "a complete victim is the newest")
                resumes.append(Path(newest).name)
            if attempt == KILLS + 1:
                break
            pid = int(start["pid"])
            # First a periodic save of this attempt that completes (Lightning writes one at a
            # time: it is complete once the next one appears), so an older good one exists.
            seen = set(os.listdir(ckpt)) if ckpt.exists() else set()
            first = self.wait_for_new_file(ckpt, seen, temp=False, pid=pid)
            seen.add(first.name)
            by_callback = attempt % 2 == 0
            if by_callback:  # SpotvisorCallback's save: SIGUSR1, then a .tmp- file renamed into place
                os.kill(pid, signal.SIGUSR1)
            victim = self.wait_for_new_file(ckpt, seen, temp=by_callback, pid=pid)
            time.sleep(rng.uniform(0.0, 0.06))  # a random moment of the ~0.1 s copy
            os.kill(pid, signal.SIGKILL)
            sv.wait_event("attempt_ended", 60, lambda e: e.get("attempt") == str(attempt))
            victims.append(("SpotvisorCallback" if by_callback else "ModelCheckpoint", victim))

        loadable = self.torch_loadable([v[3] for v in victims if v[0] == "ModelCheckpoint"])
        for how, victim, rejected, copy in victims:
            if how == "SpotvisorCallback":  # a temp name: never a candidate, so never rejected either
                self.assertFalse(NAME.fullmatch(victim.name) or rejected, f"only a temp name was cut: {victim}")
                continue
            self.assertEqual(rejected, not loadable[str(copy)],
                             f"{victim}: spotvisor {'rejected' if rejected else 'kept'} it, torch.load "
                             f"{'reads' if loadable[str(copy)] else 'cannot read'} it")
        cut = sum(rejected for how, _, rejected, _ in victims if how == "ModelCheckpoint")
        print(f"\n[lightning] SIGKILL mid-save: {len(victims)} kills; {cut} of "
              f"{sum(v[0] == 'ModelCheckpoint' for v in victims)} in ModelCheckpoint's save left a cut "
              f"final-named .ckpt (Lightning copies it from $TMPDIR on tmpfs): rejected, quarantined, never "
              f"resumed from; {sum(v[0] == 'SpotvisorCallback' for v in victims)} in SpotvisorCallback's save "
              f"left only a temp name; the attempts after them resumed from {', '.join(resumes)}")
        self.assertGreater(cut, 0, "no kill landed inside Lightning's copy: the test did not see a cut file")

    def wait_for_new_file(self, ckpt: Path, seen: set, *, temp: bool, pid: int) -> Path:
        """The first entry not in `seen`: a final name (`epoch=*-step=*.ckpt`), or with `temp`
        SpotvisorCallback's `.tmp-epoch=...` (final names that appear meanwhile join `seen`)."""
        end = deadline(120)
        while time.monotonic() < end:
            try:
                names = set(os.listdir(ckpt))
            except FileNotFoundError:
                names = set()
            for name in names - seen:
                if (name.startswith(".tmp-epoch=") if temp else bool(NAME.fullmatch(name))):
                    return ckpt / name
            seen |= {n for n in names - seen if not n.startswith(".tmp-")}
            self.assertTrue(pid_alive(pid), "the trainer exited before it saved")
            time.sleep(0.001)
        raise AssertionError(f"no new {'temp' if temp else 'checkpoint'} file in {ckpt}")

    def torch_loadable(self, files: List[Path]) -> Dict[str, bool]:
        code = ("import json, sys, torch\n"
                "ok = {}\n"
                "for f in sys.argv[1:]:\n"
                "    try:\n"
                "        torch.load(f, map_location='cpu', weights_only=False); ok[f] = True\n"
                "    except Exception:\n"
                "        ok[f] = False\n"
                "print(json.dumps(ok))\n")
        out = subprocess.run([PYTHON, "-c", code, *map(str, files)], capture_output=True, text=True,
                             env=clean_env({"OMP_NUM_THREADS": "1"}), timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])


class LightningDdp(NeedsTorchrun, LightningCase):

    def test_a_notice_stops_both_ranks_at_one_step_and_the_run_resumes(self):
        reference = Reference(self, [*TORCHRUN, EXAMPLE, "--ckpt-dir", "ckpt", "--result-file", "result.txt",
                                          *DDP_ARGS])
        mock = self.mock("aws")
        job = self.write_job([*TORCHRUN, EXAMPLE, *trainer_args(DDP_ARGS)], endpoint=mock.url)
        ckpt = self.dir / "ckpt"
        sv = self.supervise(job, "run")

        sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == "1")
        # Unanchored: the two ranks share one pipe, and under PYTHONUNBUFFERED=1 each print is
        # two writes (its text, then its newline), so lines printed at one moment can come
        # out as "[lightning] rank=1 …[lightning] rank=0 …\n\n".
        sv.wait_for(r"\[lightning\] rank=1 start", 120)
        sv.wait_for(r"\[lightning\] rank=0 start", 120)
        time.sleep(random.Random(3).uniform(2.0, 4.0))
        mock.preempt()
        ended = sv.wait_event("attempt_ended", 120, lambda e: e.get("attempt") == "1")
        self.assertEqual(ended["outcome"], "preempted", f"{ended}\n{sv.tail()}")
        step = int(sv.wait_event("drained", 120, lambda e: e.get("step", "none").isdigit())["step"])
        self.assertLess(step, DDP_STEPS, "the run ended before the notice: make it longer")
        stopped = re.findall(r"\[lightning\] rank=(\d) stopped at step=(\d+)", sv.text())
        self.assertEqual(sorted(stopped), [("0", str(step)), ("1", str(step))], f"each rank's stop\n{sv.tail()}")
        saved = checkpoint_of(ckpt, step)
        mock.clear()

        start = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == "2")
        self.assertEqual(start.get("resume"), str(saved))
        self.assert_exit(sv, 0, 300)
        self.assertEqual(self.result_of(), reference.result(),
                         "resumed DDP run: not the uninterrupted DDP run's weights")
        print(f"\n[lightning] DDP (torchrun, 2 ranks, gloo): a notice stopped both ranks at step {step}; "
              f"resumed from {saved.name}; exit 0; final weights equal the uninterrupted run's")


if __name__ == "__main__":
    unittest.main()
