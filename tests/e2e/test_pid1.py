"""End-to-end: spotvisor as PID 1 of a pod, stopped the way a kubelet stops it (issue 15).

`unshare --pid --fork --mount-proc` makes a PID namespace like a container's; the job's
trainer is the real PyTorch example behind a shell that leaves orphans (one exits at once,
one ignores SIGTERM). A harness acting as the kubelet sends SIGTERM to the namespace's
PID 1, waits terminationGracePeriodSeconds, then SIGKILLs it (which ends the namespace).
A temp file is bind-mounted over the termination-log path, as the container runtime does.

  Spotvisor   spotvisor run as PID 1: orphans reaped (no zombie in the namespace), the
              checkpoint complete (a fresh run resumes to the uninterrupted digest), exit
              code = job.stop_exit_code, the termination message written through the mount.
  Tini        tini as PID 1 with the same child and the same stop: what it leaves behind
              (docs/operations.md has the table).

Needs root (unshare, mount), util-linux unshare and (for Tini) Debian's tini; skips otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import unittest
from pathlib import Path
from typing import List, Optional

from tests.e2e.support import (PYTHON, TORCH_TRAINER, EXAMPLE_ARGS, E2ECase, clean_env, deadline, events,
                               read_attempts, reference_digest, write_job)

GRACE_PERIOD = 30  # the pod's terminationGracePeriodSeconds (> signals.grace 15s + kill_timeout 10s)
STOP_CODE = 143


def pid1_missing_reason() -> Optional[str]:
    if os.geteuid() != 0:
        return "needs root: unshare --pid and mount --bind"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"this machine cannot make a PID namespace: {probe.stderr.strip()}"
    return None


def orphan_shell(trainer: List[str]) -> List[str]:
    """sh that leaves two orphans in the trainer's group, then becomes the trainer."""
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in trainer)
    script = ("(sleep 0.5 &) ; "                       # an orphan that exits: must be reaped
              "(trap '' TERM; exec sleep 600) & "      # one that ignores SIGTERM
              f"exec {quoted}")
    return ["/bin/sh", "-c", script]


def proc_children(pid: int) -> List[int]:
    out: List[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "gone"


class Pod:
    """`unshare --pid --fork --mount-proc`: the bind mount of the termination log, then
    `init_argv` as PID 1 of the namespace. Output to `log`."""

    def __init__(self, workdir: Path, init_argv: List[str], log: Path, termination_log: Path, bound: Path) -> None:
        setup = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", setup, "sh",
                str(bound), str(termination_log), *init_argv]
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=workdir, env=clean_env(), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT)
        end = deadline(30)
        self.init = 0
        while time.monotonic() < end and self.proc.poll() is None:
            kids = proc_children(self.proc.pid)
            if kids and self._comm(kids[0]) not in ("sh", "unshare"):
                self.init = kids[0]
                break
            time.sleep(0.02)
        if not self.init:
            raise AssertionError(f"PID 1 of the namespace did not start; log:\n{self.text()}")

    @staticmethod
    def _comm(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except FileNotFoundError:
            return ""

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def processes(self) -> List[int]:
        """Every process of the namespace but PID 1 (host pids)."""
        out, todo = [], [self.init]
        while todo:
            for c in proc_children(todo.pop()):
                out.append(c)
                todo.append(c)
        return out

    def zombies(self) -> List[int]:
        """Children of PID 1 that exited and were not reaped."""
        return [p for p in proc_children(self.init) if proc_state(p) == "Z"]

    def kubelet_stop(self, grace_period: float) -> dict:
        """SIGTERM to PID 1, wait the grace period, SIGKILL. What happened, for the table."""
        os.kill(self.init, signal.SIGTERM)
        try:
            code = self.proc.wait(grace_period)
            return {"exit_code": code, "sigkilled": False}
        except subprocess.TimeoutExpired:
            os.kill(self.init, signal.SIGKILL)
            return {"exit_code": self.proc.wait(30), "sigkilled": True}

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.init, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.kill()
            self.proc.wait(30)


class Pid1Case(E2ECase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        reason = pid1_missing_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.D = reference_digest("example")

    def setUp(self) -> None:
        super().setUp()
        self.termination_log = self.dir / "termination-log"
        self.bound = self.dir / "bound-termination-log"
        self.termination_log.write_text("")
        self.bound.write_text("")
        self._pods: List[Pod] = []
        self.addCleanup(lambda: [p.kill() for p in self._pods])

    def trainer(self, step_sleep: float) -> List[str]:
        return [PYTHON, str(TORCH_TRAINER), "--ckpt-dir", str(self.dir / "ckpt"), "--result-file",
                str(self.dir / "result.txt"), *EXAMPLE_ARGS, "--step-sleep", str(step_sleep)]

    def pod(self, init_argv: List[str], name: str) -> Pod:
        pod = Pod(self.dir, init_argv, self.dir / f"{name}.log", self.termination_log, self.bound)
        self._pods.append(pod)
        return pod

    def wait_for_file(self, path: Path, pod: Pod, timeout: float = 120) -> None:
        end = deadline(timeout)
        while not path.exists():
            if pod.proc.poll() is not None or time.monotonic() > end:
                raise AssertionError(f"no {path} (pod exited: {pod.proc.poll()}); log:\n{pod.text()[-4000:]}")
            time.sleep(0.05)

    def wait_no_zombies(self, pod: Pod) -> List[int]:
        """The orphan that exits at once has exited; PID 1 must have reaped it."""
        end = deadline(5)
        while time.monotonic() < end:
            if not pod.zombies():
                return []
            time.sleep(0.05)
        return pod.zombies()


class Spotvisor(Pid1Case):
    def test_kubelet_stop_of_spotvisor_as_pid1(self):
        job = write_job(self.dir / "job.yaml", name="e2e-pid1", command=orphan_shell(self.trainer(0.3)),
                        resume_args=["--resume_from={checkpoint}"], pattern="ckpt_step{step}", grace="15s",
                        extra=f"  termination_log: {json.dumps(str(self.termination_log))}\n")
        text = job.read_text().replace("  success_exit_codes: [0]\n",
                                       f"  success_exit_codes: [0]\n  stop_exit_code: {STOP_CODE}\n")
        job.write_text(text)
        pod = self.pod([self.binary, "run", "--config", str(job)], "pod")
        self.wait_for_file(self.dir / "ckpt" / "ckpt_step10", pod)
        self.assertEqual(self.wait_no_zombies(pod), [], "an orphan was left a zombie by spotvisor as PID 1")
        stop = pod.kubelet_stop(GRACE_PERIOD)
        log = pod.text()
        self.assertFalse(stop["sigkilled"], f"spotvisor outlived the grace period; log:\n{log[-4000:]}")
        self.assertEqual(stop["exit_code"], STOP_CODE, log[-4000:])
        self.assertEqual(len(events(log, "group_leftovers")), 1, "the orphan ignoring SIGTERM was not found")
        # The termination message went through the bind mount into the bound file.
        message = json.loads(self.bound.read_text())
        self.assertEqual(message["exit_code"], STOP_CODE)
        self.assertIn("stopped on request", message["why"])
        self.assertEqual(message["attempts"], 1)
        self.assertRegex(message["checkpoint"]["name"], r"^ckpt_step\d+$")
        self.assertEqual(self.termination_log.read_text(), "", "written beside the mount, not through it")
        # Complete: a fresh run (no namespace needed) resumes from it to the uninterrupted digest.
        newest = message["checkpoint"]["step"]
        self.assertGreaterEqual(newest, 10)
        self.assertIn("'--step-sleep' '0.3'", text)
        job.write_text(text.replace("'--step-sleep' '0.3'", "'--step-sleep' '0'"))
        resume = subprocess.run([self.binary, "run", "--config", str(job)], cwd=self.dir, env=clean_env(),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        self.assertEqual(resume.returncode, 0, resume.stdout[-3000:] + resume.stderr[-3000:])
        self.assertEqual((self.dir / "result.txt").read_text().strip(), self.D)
        attempts = read_attempts(self.dir / "state")
        self.assertEqual(attempts[1]["resume_step"], newest, attempts)


class Tini(Pid1Case):
    def setUp(self) -> None:
        super().setUp()
        if shutil.which("tini") is None:
            self.skipTest("tini is not installed (Debian: apt-get install tini)")

    def test_kubelet_stop_of_tini_as_pid1(self):
        pod = self.pod(["tini", "--", *orphan_shell(self.trainer(0.3))], "pod")
        self.wait_for_file(self.dir / "ckpt" / "ckpt_step10", pod)
        self.assertEqual(self.wait_no_zombies(pod), [], "tini left an orphan a zombie")
        stop = pod.kubelet_stop(GRACE_PERIOD)
        log = pod.text()
        self.assertFalse(stop["sigkilled"], log[-4000:])
        # What tini leaves: the trainer's own exit code (0 after its SIGTERM save, which a
        # Job records as Succeeded though training is not done), no termination message.
        self.assertEqual(stop["exit_code"], 0, log[-4000:])
        self.assertEqual(self.bound.read_text(), "")
        self.assertIn("[trainer] saved", log)
        self.assertFalse((self.dir / "result.txt").exists(), "the job is not done, yet the pod 'succeeded'")


if __name__ == "__main__":
    unittest.main()
