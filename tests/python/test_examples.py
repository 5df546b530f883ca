"""The example trainers keep spotvisor's promise: interrupted any number of times, in any
way the contract allows (SIGTERM, SIGUSR1, SIGKILL after a periodic checkpoint), and
resumed with --resume_from (or $SPOTVISOR_RESUME_FROM), they end with the same weights as
an uninterrupted run. The test plays the supervisor: it starts the trainer in its own
process group, signals the group, and restarts it from the newest checkpoint."""

import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import unittest
from pathlib import Path

import harness
from harness import TrainerProcess, digest_of, run_to_end
from spotvisor_helper import Checkpointer, verify_manifest

STEP_SLEEP = "0.04"     # 60 steps ≈ 2.4 s: room to interrupt mid-run, even on a busy machine


class ExactResumeContract:
    """Mixed into one TestCase per example trainer."""

    TRAINER: Path
    STATE_FILE: str

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.root = Path(cls._tmp.name)
        cls.baseline_dir = cls.root / "baseline"
        proc = run_to_end(cls.argv(cls.baseline_dir, result=cls.root / "baseline.txt"))
        cls.baseline = digest_of(proc)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def argv(cls, ckpt_dir, *extra, result=None, sleep="0"):
        argv = [sys.executable, str(cls.TRAINER), "--ckpt-dir", str(ckpt_dir),
                "--step-sleep", sleep]
        if result is not None:
            argv += ["--result-file", str(result)]
        return argv + list(extra)

    def scratch(self, name) -> Path:
        """A fresh directory for this test; its parent holds this test's result.txt."""
        path = self.root / self.id().rsplit(".", 1)[-1] / name
        path.mkdir(parents=True)
        return path

    def copy_baseline_checkpoint(self, step) -> Path:
        target = self.scratch("ckpt")
        shutil.copytree(self.baseline_dir / f"ckpt_step{step}", target / f"ckpt_step{step}")
        return target / f"ckpt_step{step}"

    def resume_to_end(self, ckpt_dir, checkpoint, *extra) -> str:
        result = ckpt_dir.parent / "result.txt"
        proc = run_to_end(self.argv(ckpt_dir, f"--resume_from={checkpoint}", *extra, result=result))
        digest = digest_of(proc)
        self.assertEqual(result.read_text(), digest + "\n")
        return digest

    def stop_with(self, ckpt_dir, signum, after_step, resume_from=None) -> int:
        """Start (or resume), signal the group after `after_step`, return the saved step."""
        extra = [f"--resume_from={resume_from}"] if resume_from else []
        with TrainerProcess(self.argv(ckpt_dir, *extra, sleep=STEP_SLEEP)) as proc:
            proc.wait_for(rf"^(\[\w+\]:)?step={after_step} ")
            proc.signal_group(signum)
            rc = proc.wait()
            self.assertEqual(rc, 0, proc.output_tail())
            saved = int(proc.wait_for(r"\[trainer\] saved step=(\d+) reason=stop", 1).group(1))
            stopped = int(proc.wait_for(r"\[trainer\] stopping step=(\d+)", 1).group(1))
            self.assertEqual(saved, stopped)
            self.assertGreaterEqual(saved, after_step)
            self.assertNotIn("[trainer] done", proc.output)
        verify_manifest(ckpt_dir / f"ckpt_step{saved}")
        return saved

    # --- the promise -------------------------------------------------------------------
    def test_uninterrupted_run_leaves_periodic_checkpoints_and_a_result(self):
        # That a second uninterrupted run agrees is shown by test_sigusr1_...: it runs to
        # the end and must match the baseline.
        self.assertEqual([s for s, _ in Checkpointer(self.baseline_dir).checkpoints()], [20, 40, 60])
        for step in (20, 40, 60):
            manifest = verify_manifest(self.baseline_dir / f"ckpt_step{step}")
            self.assertEqual([f.path for f in manifest.files], [self.STATE_FILE])
        self.assertEqual((self.root / "baseline.txt").read_text(), self.baseline + "\n")

    def test_sigterm_twice_then_resume_is_exact(self):
        ckpt_dir = self.scratch("ckpt")
        first = self.stop_with(ckpt_dir, signal.SIGTERM, after_step=12)
        second = self.stop_with(ckpt_dir, signal.SIGTERM, after_step=first + 15,
                                resume_from=ckpt_dir / f"ckpt_step{first}")
        self.assertLess(second, 60)
        digest = self.resume_to_end(ckpt_dir, ckpt_dir / f"ckpt_step{second}")
        self.assertEqual(digest, self.baseline)

    def test_sigkill_resumes_from_the_periodic_checkpoint(self):
        ckpt_dir = self.scratch("ckpt")
        with TrainerProcess(self.argv(ckpt_dir, sleep=STEP_SLEEP)) as proc:
            proc.wait_for(r"\[trainer\] saved step=20 reason=periodic")
            proc.wait_for(r"^step=27 ")
            proc.signal_group(signal.SIGKILL)           # no warning, no chance to save
            self.assertEqual(proc.wait(), -signal.SIGKILL)
            self.assertNotIn("[trainer] done", proc.output)
        latest = Checkpointer(ckpt_dir).latest()
        steps = [s for s, _ in Checkpointer(ckpt_dir).checkpoints()]
        self.assertEqual(steps, list(range(20, steps[-1] + 1, 20)))   # periodic ones only
        self.assertIn(steps[-1], (20, 40))      # 40 only if the kill landed very late
        self.assertEqual(latest, ckpt_dir / f"ckpt_step{steps[-1]}")
        self.assertFalse((ckpt_dir.parent / "result.txt").exists())
        self.assertEqual(self.resume_to_end(ckpt_dir, latest), self.baseline)

    def test_sigusr1_checkpoints_and_continues(self):
        ckpt_dir = self.scratch("ckpt")
        result = ckpt_dir.parent / "result.txt"
        # --keep 0: the early signal checkpoint must survive retention for the resume below.
        argv = self.argv(ckpt_dir, "--keep", "0", result=result, sleep=STEP_SLEEP)
        with TrainerProcess(argv) as proc:
            proc.wait_for(r"^step=7 ")
            proc.signal_group(signal.SIGUSR1)
            saved = int(proc.wait_for(r"\[trainer\] saved step=(\d+) reason=signal").group(1))
            self.assertEqual(proc.wait(), 0)
            self.assertEqual(digest_of(proc), self.baseline)   # saving does not perturb
        self.assertTrue(7 <= saved < 60, saved)
        resumed_dir = self.scratch("resumed")
        shutil.copytree(ckpt_dir / f"ckpt_step{saved}", resumed_dir / f"ckpt_step{saved}")
        self.assertEqual(self.resume_to_end(resumed_dir, resumed_dir / f"ckpt_step{saved}"),
                         self.baseline)

    def test_resume_from_environment_variable(self):
        checkpoint = self.copy_baseline_checkpoint(40)
        env = harness.child_env({"SPOTVISOR_RESUME_FROM": str(checkpoint)})
        proc = run_to_end(self.argv(checkpoint.parent), env=env)
        proc.wait_for(rf"\[trainer\] resumed from={checkpoint} step=40 rng=yes", 1)
        self.assertEqual(digest_of(proc), self.baseline)

    def test_resume_from_the_final_checkpoint_only_writes_the_result(self):
        checkpoint = self.copy_baseline_checkpoint(60)
        self.assertEqual(self.resume_to_end(checkpoint.parent, checkpoint), self.baseline)
        self.assertEqual(os.listdir(checkpoint.parent), ["ckpt_step60"])

    def test_stop_reports_the_notice_file(self):
        ckpt_dir = self.scratch("ckpt")
        notice = ckpt_dir.parent / "notice.json"
        notice.write_text('{"kind": "preemption", "provider": "aws", "action": "terminate", '
                          '"deadline": "2999-01-01T00:00:00Z"}')
        env = harness.child_env({"SPOTVISOR_NOTICE_FILE": str(notice)})
        with TrainerProcess(self.argv(ckpt_dir, sleep=STEP_SLEEP), env=env) as proc:
            proc.wait_for(r"^(\[\w+\]:)?step=3 ")
            proc.signal_group(signal.SIGTERM)
            self.assertEqual(proc.wait(), 0)
            proc.wait_for(r"stopping step=\d+ notice=preemption provider=aws action=terminate "
                          r"seconds_left=\d+", 1)

    # --- the checks can fail --------------------------------------------------------------
    def test_broken_rng_restore_changes_the_result(self):
        checkpoint = self.copy_baseline_checkpoint(20)
        digest = self.resume_to_end(checkpoint.parent, checkpoint, "--break-rng-restore")
        self.assertNotEqual(digest, self.baseline)


class PlainTrainerTest(ExactResumeContract, unittest.TestCase):
    TRAINER = harness.PLAIN_TRAINER
    STATE_FILE = "state.pkl"

    def test_corrupt_checkpoint_is_refused_with_its_name(self):
        checkpoint = self.copy_baseline_checkpoint(40)
        state = checkpoint / self.STATE_FILE
        data = bytearray(state.read_bytes())
        data[len(data) // 3] ^= 0x10
        state.write_bytes(bytes(data))
        with TrainerProcess(self.argv(checkpoint.parent, f"--resume_from={checkpoint}")) as proc:
            self.assertEqual(proc.wait(), 1)
            proc.wait_for(rf"error: .*{checkpoint}.*'{self.STATE_FILE}' has CRC-32", 1)
        # (The same check for state.pt is the helper's; see test_checkpointer.py.)

    def test_runs_without_torch_or_numpy(self):
        ckpt_dir = self.scratch("ckpt")
        code = ("import sys, runpy; sys.modules['torch'] = None; sys.modules['numpy'] = None; "
                f"sys.argv = ['train.py', '--ckpt-dir', {str(ckpt_dir)!r}]; "
                f"runpy.run_path({str(self.TRAINER)!r}, run_name='__main__')")
        proc = run_to_end([sys.executable, "-c", code])
        self.assertEqual(digest_of(proc), self.baseline)


@unittest.skipUnless(harness.HAS_TORCH and harness.HAS_NUMPY, "torch and numpy are needed")
class TorchTrainerTest(ExactResumeContract, unittest.TestCase):
    TRAINER = harness.TORCH_TRAINER
    STATE_FILE = "state.pt"


def torchrun_usable() -> bool:
    if not (harness.HAS_TORCH and harness.HAS_NUMPY and harness.has_module("torch.distributed.run")):
        return False
    import torch.distributed as dist
    return dist.is_available() and dist.is_gloo_available()


# --standalone, but on a port of the kernel's choosing: torch 1.13's --standalone always takes
# 29400, where another launcher at once (an e2e test, another checkout's run) would share its
# rendezvous store and lose it when that one exits. (torch 2.x's --standalone says localhost:0.)
TORCHRUN_ARGS = ["--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0", "--nproc_per_node=2", "--redirects", "1", "--tee", "1",
                 "--monitor_interval", "0.5"]


@unittest.skipUnless(torchrun_usable(), "torchrun with gloo is not available")
class TorchrunTrainerTest(unittest.TestCase):
    """DDP with 2 workers under torchrun: SIGUSR1 to the workers, SIGTERM to the whole group."""

    def argv(self, ckpt_dir, *extra, result=None, sleep="0"):
        argv = [sys.executable, "-m", "torch.distributed.run", *TORCHRUN_ARGS,
                str(harness.TORCH_TRAINER), "--ckpt-dir", str(ckpt_dir), "--step-sleep", sleep]
        if result is not None:
            argv += ["--result-file", str(result)]
        return argv + list(extra)

    def test_preempted_and_resumed_equals_uninterrupted(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            baseline = digest_of(run_to_end(self.argv(root / "base", result=root / "base.txt")))
            self.assertEqual((root / "base.txt").read_text(), baseline + "\n")

            ckpt_dir = root / "ckpt"
            with TrainerProcess(self.argv(ckpt_dir, sleep="0.05")) as proc:
                proc.wait_for(r"\]:step=8 ")
                # To the workers, as spotvisor's signals.target: workers does (SIGUSR1 kills the agent).
                self.assertEqual(proc.signal_children(signal.SIGUSR1), 2)
                saved = int(proc.wait_for(r"saved step=(\d+) reason=signal").group(1))
                proc.wait_for(rf"\]:step={saved + 10} ")
                proc.signal_group(signal.SIGTERM)
                proc.wait(90)                         # torchrun's own exit code varies
                stopped = int(proc.wait_for(r"\[trainer\] stopping step=(\d+)", 1).group(1))
                self.assertNotIn("[trainer] done", proc.output)
            self.assertLess(stopped, 60)
            verify_manifest(ckpt_dir / f"ckpt_step{stopped}")
            resumed = run_to_end(self.argv(ckpt_dir, f"--resume_from={ckpt_dir}/ckpt_step{stopped}",
                                           result=root / "resumed.txt"))
            resumed.wait_for(rf"resumed from=.*ckpt_step{stopped} step={stopped} rng=yes", 1)
            self.assertEqual(digest_of(resumed), baseline)
            self.assertEqual((root / "resumed.txt").read_text(), baseline + "\n")

    def test_checkpoint_requests_at_random_moments_never_split_the_ranks(self):
        # A SIGUSR1 handled on one rank between agree()'s all-reduce and its return once made
        # that rank save alone while its peer trained on: both hung in mismatched collectives.
        # Many requests at random moments (the race hit about one run in two); every one is
        # answered by both ranks together and the run ends.
        with tempfile.TemporaryDirectory() as tmp:
            ckpt_dir = Path(tmp) / "ckpt"
            argv = self.argv(ckpt_dir, "--steps", "400", "--checkpoint-every", "0", "--keep", "2", sleep="0.01")
            with TrainerProcess(argv) as proc:
                proc.wait_for(r"\[trainer\] start step=0", 120)
                requests, pause = 0, random.Random()
                lines, moved = 0, time.monotonic()
                while proc.proc.poll() is None:
                    requests += proc.signal_children(signal.SIGUSR1, only_handlers=True) > 0
                    time.sleep(pause.uniform(0.02, 0.25))
                    if len(proc.lines) != lines:
                        lines, moved = len(proc.lines), time.monotonic()
                    elif time.monotonic() - moved > 30:
                        self.fail(f"no step for 30 s after {requests} requests (ranks hung):\n{proc.output_tail()}")
                rc = proc.wait(30)
                self.assertEqual(rc, 0, f"after {requests} requests:\n{proc.output_tail()}")
                saved = [int(m) for m in re.findall(r"saved step=(\d+) reason=signal", proc.output)]
                proc.wait_for(r"\[trainer\] done step=400 ", 1)
            self.assertGreaterEqual(len(saved), 10, f"{requests} requests")
            self.assertEqual(saved, sorted(set(saved)))       # one save per answered boundary
            verify_manifest(ckpt_dir / "ckpt_step400")


if __name__ == "__main__":
    unittest.main()
