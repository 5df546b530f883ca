"""End-to-end: the real spotvisor, the real mock metadata server, the real PyTorch example.

Every case ends with the digest of the final weights (the job's result file) equal to the
digest D of the same trainer run uninterrupted, directly, without spotvisor:
  (a) Uninterrupted   under spotvisor, no interruption            -> D
  (b) NoticeAws/Gcp   a notice through the mock, the trainer checkpoints inside the window,
                      spotvisor drains, the machine goes away (SIGTERM -> 75), a fresh
                      `spotvisor run` resumes                       -> D
  (c) TrainerKill     SIGKILL of the trainer, no warning: restart from the periodic checkpoint -> D
  (d) CorruptNewest   the newest checkpoint truncated / a byte of tensor data flipped:
                      rejected, quarantined, the previous one used   -> D
  (e) Torchrun        torchrun with 2 workers, preempted through the mock and resumed -> D(torchrun)

Run: SPOTVISOR_BINARY=build/spotvisor /usr/bin/python3 -m unittest tests.e2e.test_exact_resume -v
(torch 2.x trainers: SPOTVISOR_E2E_TORCH_PYTHON=<venv python>; D is then torch 2.x's own digest.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import unittest
import zipfile
from pathlib import Path

from tests.e2e.support import (E2ECase, NeedsTorchrun, events, example_command, read_attempts, read_state,
                               reference_digest, write_job)


class ExampleCase(E2ECase):
    """The PyTorch example (examples/torch_trainer/train.py), 40 steps, checkpoint every 10."""

    reference = "example"

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.D = reference_digest(cls.reference)

    def job(self, workdir: Path = None, *, step_sleep: float = 0.1, torchrun: bool = False, **kw) -> Path:
        workdir = workdir or self.dir
        return write_job(workdir / "job.yaml", name=f"e2e-{self._testMethodName}",
                         command=example_command(step_sleep=step_sleep, torchrun=torchrun),
                         resume_args=["--resume_from={checkpoint}"], pattern="ckpt_step{step}", **kw)

    def assert_digest(self, workdir: Path = None) -> None:
        self.assertEqual(self.result_of(workdir), self.D,
                         "the resumed run's digest differs from the uninterrupted run's")


class Uninterrupted(ExampleCase):
    """(a) spotvisor in front of the trainer changes nothing: exit 0 and digest D."""

    def test_uninterrupted_run_under_spotvisor_gives_the_reference_digest(self):
        sv = self.supervise(self.job(step_sleep=0), "run")
        self.assert_exit(sv, 0)
        self.assert_digest()
        log = sv.text()
        started = events(log, "trainer_started")
        self.assertEqual([(e["attempt"], e["resume"]) for e in started], [("1", "none")])
        self.assertIn(f"[trainer] done step=40 digest={self.D}", log)
        attempts = read_attempts(self.dir / "state")
        self.assertEqual([a["attempt"] for a in attempts], [1], attempts)
        self.assertEqual(attempts[0].get("exit_code"), 0, attempts)
        # Periodic checkpoints at 10..40; keep: 0 = all.
        steps = sorted(int(p.name[len("ckpt_step"):]) for p in (self.dir / "ckpt").glob("ckpt_step*"))
        self.assertEqual(steps, [10, 20, 30, 40])


class NoticeCase(ExampleCase):
    """(b) A notice mid-run through the mock metadata server, drain, machine gone, resume."""

    provider = "aws"

    def test_notice_checkpoint_in_window_drain_and_resume(self):
        mock = self.mock(self.provider)
        job = self.job(provider=self.provider, endpoint=mock.url, poll_interval="200ms")

        sv = self.supervise(job, "run1")
        sv.wait_for(r"^\[trainer\] saved step=10 reason=periodic", 180)
        sv.wait_for(r"^step=1[3-9] ", 60)
        mock.preempt()
        notice = sv.wait_event("notice", 30, lambda e: "warning_ms" in e)   # the supervisor's line
        self.assertEqual((notice["provider"], notice["action"]), (self.provider, "stop"), notice)
        # The trainer saved at the next step boundary, inside the window, and saw the notice file.
        saved = sv.wait_for(r"^\[trainer\] saved step=(\d+) reason=stop path=(\S+)", 60)
        step, path = int(saved.group(1)), saved.group(2)
        self.assertGreater(step, 10)
        self.assertLess(step, 40, "the notice came too late: the run had finished")
        stopping = sv.wait_for(r"^\[trainer\] stopping step=(\d+)(.*)$", 30)
        self.assertEqual(int(stopping.group(1)), step)
        self.assertRegex(stopping.group(2), rf"notice=\S+ provider={self.provider} action=stop seconds_left=\d+",
                         "the trainer did not read the notice file")
        self.assertGreater(int(notice["warning_ms"]), 0, notice)
        drained = sv.wait_event("drained", 60, lambda e: "newest_good" in e)
        self.assertEqual((drained["newest_good"], drained["step"]), (path, str(step)),
                         "the drain did not validate the checkpoint written in the window")
        self.assertIsNone(sv.proc.poll(), "spotvisor must wait for the machine to go away after draining")
        state = read_state(self.dir / "state")
        self.assertEqual(state["phase"], "drained", state)
        self.assertEqual(state["preemptions"], 1, state)

        # The machine goes away: systemd stops the service.
        sv.signal(signal.SIGTERM)
        self.assert_exit(sv, 75, 60)
        self.assertFalse((self.dir / "result.txt").exists(), "a stopped trainer must not write a result")

        # After the reboot the notice is gone; a fresh spotvisor resumes from the window's checkpoint.
        mock.clear()
        sv2 = self.supervise(job, "run2")
        self.assert_exit(sv2, 0)
        log2 = sv2.text()
        self.assertEqual([(e["attempt"], e["resume"]) for e in events(log2, "trainer_started")], [("2", path)])
        self.assertIn(f"[trainer] resumed from={path} step={step} rng=yes", log2)
        self.assertEqual(events(log2, "notice"), [])
        self.assertFalse((self.dir / "state" / "notice.json").exists(), "the notice file must be gone on resume")
        attempts = read_attempts(self.dir / "state")
        self.assertEqual([(a["attempt"], a["outcome"]) for a in attempts][:1], [(1, "preempted")], attempts)
        self.assertEqual(attempts[-1].get("resume_step"), step, attempts)
        self.assert_digest()


class NoticeAws(NoticeCase):
    provider = "aws"


class NoticeGcp(NoticeCase):
    provider = "gcp"


del NoticeCase  # only its flavours run


class TrainerKill(ExampleCase):
    """(c) SIGKILL of the trainer, no warning: restarted from the periodic checkpoint."""

    def test_sigkill_of_the_trainer_resumes_from_the_periodic_checkpoint(self):
        # 0.25 s a step: the kill lands in steps 23..39 even when this test sees the log
        # seconds late on a loaded machine (at 0.1 s the trainer could finish first).
        sv = self.supervise(self.job(step_sleep=0.25), "run")
        pid = self.trainer_pid(sv, 1)
        sv.wait_for(r"^\[trainer\] saved step=20 reason=periodic", 180)
        sv.wait_for(r"^step=2[3-9] ", 60)
        os.kill(pid, signal.SIGKILL)
        # The newest checkpoint on disk when the trainer died (the helper renames a
        # complete checkpoint into place, so every ckpt_step<N> directory is whole).
        expected = max(checkpoint_steps(self.dir / "ckpt"))
        self.assertIn(expected, (20, 30))
        ended = sv.wait_event("attempt_ended", 60, lambda e: e["attempt"] == "1")
        self.assertEqual(ended["outcome"], "failed", ended)
        self.assert_exit(sv, 0)
        log = sv.text()
        self.assertEqual([(e["attempt"], e["resume"]) for e in events(log, "trainer_started")],
                         [("1", "none"), ("2", str(self.dir / "ckpt" / f"ckpt_step{expected}"))])
        self.assertRegex(log, rf"\[trainer\] resumed from=\S+/ckpt_step{expected} step={expected} rng=yes")
        attempts = read_attempts(self.dir / "state")
        self.assertEqual(attempts[0].get("signal"), signal.SIGKILL, attempts)
        self.assertEqual(attempts[1].get("resume_step"), expected, attempts)
        self.assertEqual(attempts[1].get("exit_code"), 0, attempts)
        self.assert_digest()


def checkpoint_steps(ckpt: Path) -> list:
    return sorted(int(m.group(1)) for p in ckpt.iterdir() if (m := re.fullmatch(r"ckpt_step(\d+)", p.name)))


def flip_tensor_byte(path: Path) -> str:
    """Flips one byte in the middle of the largest tensor record of a torch.save ZIP."""
    with zipfile.ZipFile(path) as z:
        infos = [i for i in z.infolist() if re.search(r"/data/\d+$", i.filename)]
        info = max(infos, key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        name_len = int.from_bytes(header[26:28], "little")
        extra_len = int.from_bytes(header[28:30], "little")
        at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))
    return info.filename


class CorruptNewest(ExampleCase):
    """(d) The newest checkpoint is damaged before the resume: rejected, quarantined, fallback."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # One interrupted run, shared by the three cases: periodic 10 and 20, then SIGTERM to
        # spotvisor (a shutdown) after step 22: the trainer saves its stop checkpoint, exit 75.
        import tempfile
        cls.seed_dir = Path(tempfile.mkdtemp(prefix="spotvisor-e2e-corrupt-seed-"))
        case = cls("test_truncated")
        case.dir = cls.seed_dir
        case._supervisors, case._mocks = [], []
        job = case.job(cls.seed_dir)
        sv = case.supervise(job, "seed")
        try:
            sv.wait_for(r"^\[trainer\] saved step=20 reason=periodic", 180)
            sv.wait_for(r"^step=2[2-9] ", 60)
            sv.signal(signal.SIGTERM)
            rc = sv.wait(90)
            if rc != 75:
                raise AssertionError(f"seed run exited {rc}:\n{sv.tail()}")
            stop = re.search(r"^\[trainer\] saved step=(\d+) reason=stop", sv.text(), re.MULTILINE)
            if not stop:
                raise AssertionError(f"seed run: no stop checkpoint:\n{sv.tail()}")
            cls.newest = int(stop.group(1))
            steps = checkpoint_steps(cls.seed_dir / "ckpt")
            if steps[-1] != cls.newest or len(steps) < 2:
                raise AssertionError(f"seed run left checkpoints {steps}, newest should be {cls.newest}")
            cls.previous = steps[-2]   # 20, unless the machine was too slow to stop before 30
        finally:
            sv.kill()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.seed_dir, ignore_errors=True)
        super().tearDownClass()

    def resume_after(self, damage) -> str:
        shutil.copytree(self.seed_dir / "ckpt", self.dir / "ckpt")
        shutil.copytree(self.seed_dir / "state", self.dir / "state")
        (self.dir / "state" / "lock").unlink(missing_ok=True)
        job = self.job()
        newest = self.dir / "ckpt" / f"ckpt_step{self.newest}"
        damage(newest)
        sv = self.supervise(job, "resume")
        self.assert_exit(sv, 0)
        log = sv.text()
        rejected = events(log, "checkpoint_rejected")
        # One line per rejection (the catalog's), and only the damaged checkpoint.
        self.assertEqual(len(rejected), 1, f"log {sv.log_path}:\n{sv.tail()}")
        self.assertEqual({Path(e["path"]) for e in rejected}, {newest}, f"log {sv.log_path}:\n{sv.tail()}")
        quarantined = self.dir / "ckpt" / ".spotvisor-quarantine" / newest.name
        self.assertEqual(rejected[0].get("quarantined_to"), str(quarantined), rejected)
        self.assertTrue(quarantined.is_dir(), "the bad checkpoint was not moved into the quarantine")
        self.assertFalse(newest.exists(), "the bad checkpoint is still where a trainer glob would find it")
        previous = self.dir / "ckpt" / f"ckpt_step{self.previous}"
        self.assertEqual([(e["attempt"], e["resume"]) for e in events(log, "trainer_started")],
                         [("2", str(previous))])
        self.assertIn(f"[trainer] resumed from={previous} step={self.previous} rng=yes", log)
        self.assertEqual(read_attempts(self.dir / "state")[-1].get("resume_step"), self.previous)
        # Journaled too: the run record (and so the report) names the rejected checkpoint.
        record = json.loads((self.dir / "state" / "run.json").read_text())
        bad = [c for c in record["checkpoints"] if c["name"] == newest.name and not c["good"]]
        self.assertEqual(len(bad), 1, record["checkpoints"])
        self.assertTrue(bad[0]["reason"], bad)
        self.assert_digest()
        return rejected[0]["reason"]

    def test_truncated(self):
        def truncate(ckpt: Path) -> None:
            state = ckpt / "state.pt"
            os.truncate(state, state.stat().st_size // 2)
        reason = self.resume_after(truncate)
        self.assertRegex(reason, r"state\.pt")

    def test_flipped_byte_in_tensor_data(self):
        reason = self.resume_after(lambda ckpt: flip_tensor_byte(ckpt / "state.pt"))
        self.assertRegex(reason, r"state\.pt.*(contents changed|CRC-32 mismatch)")

    def test_flipped_byte_without_manifest_caught_by_zip_crc(self):
        # No manifest to compare against: spotvisor's own CRC-32 pass over the ZIP entries
        # (PyTorch never checks them) must catch the flip.
        def flip(ckpt: Path) -> None:
            (ckpt / "spotvisor.manifest.json").unlink()
            self.entry = flip_tensor_byte(ckpt / "state.pt")
        reason = self.resume_after(flip)
        self.assertIn("CRC-32 mismatch", reason)
        self.assertIn(self.entry, reason)


class Torchrun(NeedsTorchrun, ExampleCase):
    """(e) plain torchrun with 2 workers (DDP over gloo on CPU) as the child: notice, drain, resume."""

    reference = "torchrun"

    def test_torchrun_preempted_and_resumed(self):
        mock = self.mock("aws")
        # A grace window longer than the wait below: workers that never save are still alive
        # when it runs out, to say where they are.
        job = self.job(torchrun=True, provider="aws", endpoint=mock.url, poll_interval="200ms", grace="100s")
        sv = self.supervise(job, "run1")
        sv.wait_for(r"\[trainer\] saved step=10 reason=periodic", 240)
        sv.wait_for(r"(?:^|:)step=1[3-9] ", 60)
        mock.preempt()
        try:
            saved = sv.wait_for(r"\[trainer\] saved step=(\d+) reason=stop path=(\S+)", 90)
        except AssertionError as e:
            raise AssertionError(f"{e}\n\nthe workers' stacks:\n{sv.worker_stacks()}") from None
        step, path = int(saved.group(1)), saved.group(2)
        self.assertLess(step, 40)
        self.assertRegex(sv.wait_for(r"\[trainer\] stopping step=\d+(.*)$", 30).group(1), r"notice=\S+ provider=aws")
        drained = sv.wait_event("drained", 90, lambda e: "newest_good" in e)
        self.assertEqual((drained["newest_good"], drained["step"]), (path, str(step)))
        sv.signal(signal.SIGTERM)
        self.assert_exit(sv, 75, 90)

        mock.clear()
        sv2 = self.supervise(job, "run2")
        self.assert_exit(sv2, 0, 300)
        log2 = sv2.text()
        self.assertEqual([(e["attempt"], e["resume"]) for e in events(log2, "trainer_started")], [("2", path)])
        self.assertRegex(log2, rf"\[trainer\] resumed from={re.escape(path)} step={step} rng=yes")
        self.assert_digest()


if __name__ == "__main__":
    unittest.main()
