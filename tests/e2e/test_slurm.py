"""End-to-end: spotvisor in a real single-host SLURM cluster (issue 15).

The test starts its own cluster as root in a temp dir: munged with a fresh key on its own
socket, slurmctld and slurmd (Debian's slurm-wlm 22.05) with a generated slurm.conf
(ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, ports on 127.0.0.1), a `spot`
partition with GraceTime that the higher-priority `urgent` partition preempts with
PreemptMode=REQUEUE and SlurmctldParameters=preempt_send_user_signal.

  Slurm   a batch job `srun spotvisor run --config job.yaml` (sbatch --requeue
          --signal=USR2@10 --open-mode=append) runs the real PyTorch example. A job in
          `urgent` preempts it: SLURM sends SIGUSR2 to the step (signals.stop_on; the
          trainer, which gets it too, saves on it: --stop-signal SIGUSR2), the trainer
          checkpoints, spotvisor exits 75 after `scontrol requeue`; the job runs again with
          SLURM_RESTART_COUNT=1, resumes and ends with the weights of an uninterrupted run.
          The attempts in the state dir carry slurm_restart_count 0 and 1.

SLURM holds a requeued job back (Reason=BeginTime, about 2 minutes); the test, acting as
the admin, releases it at once with `scontrol update JobId=N BeginTime=now`.
Skipped, with the reason, when the cluster cannot start here (not root, no slurm-wlm/munge).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Dict, List, Optional

from tests.e2e.support import (E2ECase, clean_env, deadline, events, example_command, free_port, read_attempts,
                               reference_digest, write_job)

BINARIES = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "srun"]


def _which(name: str) -> Optional[str]:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)),
                                      None)


class Cluster:
    """munged + slurmctld + slurmd in `root`, one node named after this host, 2 CPUs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.procs: List[int] = []
        (root / "munge").mkdir(mode=0o700)
        for d in ("state", "spool", "log"):
            (root / d).mkdir()
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.socket = root / "munge" / "munge.sock"
        self.conf = root / "slurm.conf"
        self.conf.write_text("\n".join([
            "ClusterName=spotvisore2e",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            "AuthType=auth/munge", f"AuthInfo=socket={self.socket}", "CredType=cred/munge",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SwitchType=switch/none",
            "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "ReturnToService=2", "JobRequeue=1", "KillWait=10",
            "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE",
            "SlurmctldParameters=preempt_send_user_signal",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN",
            f"PartitionName=spot Nodes={self.node} Default=YES PriorityTier=1 GraceTime=30 PreemptMode=REQUEUE "
            "MaxTime=INFINITE State=UP",
            f"PartitionName=urgent Nodes={self.node} PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP",
        ]) + "\n")
        self.env = clean_env({"SLURM_CONF": str(self.conf)})

    def start(self) -> Optional[str]:
        """None when the node is idle; else why the cluster did not come up."""
        munge = subprocess.run([_which("munged"), "--force", f"--key-file={self.root / 'munge' / 'munge.key'}",
                                f"--socket={self.socket}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                                f"--log-file={self.root / 'munge' / 'munged.log'}",
                                f"--seed-file={self.root / 'munge' / 'seed'}"], capture_output=True, text=True)
        if munge.returncode != 0:
            return f"munged did not start: {munge.stderr.strip()}"
        self._remember("munge/munged.pid")
        for argv, pid in (([_which("slurmctld"), "-i", "-f", str(self.conf)], "slurmctld.pid"),
                          ([_which("slurmd"), "-N", self.node, "-f", str(self.conf)], "slurmd.pid")):
            started = subprocess.run(argv, env=self.env, capture_output=True, text=True)
            if started.returncode != 0:
                return f"{Path(argv[0]).name} did not start: {started.stderr.strip()}"
            end = deadline(10)
            while not (self.root / pid).exists() and time.monotonic() < end:
                time.sleep(0.05)
            self._remember(pid)
        end = deadline(60)
        while time.monotonic() < end:
            state = self.run(["sinfo", "-h", "-n", self.node, "-o", "%t"], check=False).stdout.strip()
            if state.startswith("idle"):
                return None
            time.sleep(0.5)
        return f"node {self.node} did not become idle: {self.logs()}"

    def _remember(self, pid_file: str) -> None:
        try:
            self.procs.append(int((self.root / pid_file).read_text().split()[0]))
        except (FileNotFoundError, ValueError, IndexError):
            pass

    def run(self, argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr}\n{self.logs()}")
        return out

    def job(self, job_id: str) -> Dict[str, str]:
        """`scontrol show job -o` as a dict (empty once SLURM forgot the job)."""
        out = self.run(["scontrol", "show", "job", "-o", job_id], check=False).stdout.strip()
        fields = {}
        for word in out.split():
            if "=" in word:
                k, v = word.split("=", 1)
                fields[k] = v
        return fields

    def logs(self) -> str:
        text = []
        for name in ("log/slurmctld.log", "log/slurmd.log"):
            path = self.root / name
            if path.exists():
                text.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(text)

    def stop(self) -> None:
        for pid in reversed(self.procs):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            end = time.monotonic() + 15
            while time.monotonic() < end:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class Slurm(E2ECase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: the test runs slurmctld, slurmd and munged as root")
        missing = [b for b in BINARIES if _which(b) is None]
        if missing:
            raise unittest.SkipTest(f"not installed: {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
        cls.D = reference_digest("example")
        cls.cluster_dir = Path(tempfile.mkdtemp(prefix="spotvisor-e2e-slurm-"))
        cls.cluster = Cluster(cls.cluster_dir)
        why = cls.cluster.start()
        if why:
            cls.cluster.stop()
            raise unittest.SkipTest(f"the single-host SLURM cluster cannot start here: {why}")

    @classmethod
    def tearDownClass(cls) -> None:
        cluster = getattr(cls, "cluster", None)
        if cluster:
            cluster.stop()
            shutil.rmtree(cls.cluster_dir, ignore_errors=True)
        super().tearDownClass()

    def wait_job(self, job_id: str, what: str, ok, timeout: float) -> Dict[str, str]:
        end = deadline(timeout)
        while True:
            fields = self.cluster.job(job_id)
            if ok(fields):
                return fields
            if time.monotonic() > end:
                raise AssertionError(f"job {job_id}: {what} did not happen within {timeout}s: {fields}\n"
                                     f"output:\n{self.output()}\n{self.cluster.logs()}")
            time.sleep(0.2)

    def output(self) -> str:
        path = self.dir / "slurm.out"
        return path.read_text(errors="replace")[-6000:] if path.exists() else "(no output file)"

    def test_preempted_job_checkpoints_is_requeued_and_resumes_exactly(self):
        # SLURM signals every process of the step (proctrack), the trainer too: it must treat
        # USR2 as "save and exit" itself, and spotvisor passes the same signal on.
        job = write_job(self.dir / "job.yaml", name="e2e-slurm",
                        command=[*example_command(step_sleep=0.3), "--stop-signal", "SIGUSR2"],
                        resume_args=["--resume_from={checkpoint}"], pattern="ckpt_step{step}", grace="20s")
        text = job.read_text().replace("  on_notice: SIGTERM\n", "  on_notice: SIGUSR2\n")
        job.write_text(text.replace("  checkpoint: SIGUSR1\n",
                                    "  checkpoint: SIGUSR1\n  stop_on: [SIGTERM, SIGINT, SIGHUP, SIGUSR2]\n"))
        script = self.dir / "job.sh"
        script.write_text(f"#!/bin/sh\nexec srun --kill-on-bad-exit=0 {self.binary} run --config {job}\n")
        script.chmod(0o755)
        submitted = self.cluster.run(["sbatch", "--parsable", "--requeue", "--signal=USR2@10", "--open-mode=append",
                                      "-p", "spot", "-n", "1", "-c", "2", "-D", str(self.dir),
                                      "-o", str(self.dir / "slurm.out"), str(script)])
        job_id = submitted.stdout.strip().split(";")[0]
        self.wait_job(job_id, "start", lambda f: f.get("JobState") == "RUNNING", 120)
        end = deadline(180)
        while not (self.dir / "ckpt" / "ckpt_step10").exists():
            if time.monotonic() > end:
                raise AssertionError(f"no checkpoint from the first attempt:\n{self.output()}")
            time.sleep(0.1)

        # Preemption: a job in the higher-priority partition needs the node's 2 CPUs.
        self.cluster.run(["sbatch", "--parsable", "-p", "urgent", "-n", "1", "-c", "2", "-o", "/dev/null",
                          "--wrap", "sleep 1"])
        requeued = self.wait_job(job_id, "requeue", lambda f: f.get("Restarts", "0") != "0", 120)
        self.assertEqual(requeued["Restarts"], "1", requeued)
        # SLURM counts the requeue as scontrol asks for it, before spotvisor logs the answer and
        # before srun has forwarded the step's last lines: wait for them.
        end = deadline(60)
        while not events(self.output(), "slurm_requeued") and time.monotonic() < end:
            time.sleep(0.2)
        first = self.output()
        self.assertIn("detail=\"SIGUSR2 to spotvisor\"", first)  # the stop came as SLURM's user signal
        self.assertEqual(len(events(first, "slurm_requeued")), 1, first)
        self.assertEqual(events(first, "exit")[0]["code"], "75", first)
        self.assertIn("[trainer] saved", first)  # the stop checkpointed (not killed by USR2)
        # SLURM holds a requeued job back ~2 min (BeginTime): release it, as an admin may.
        self.wait_job(job_id, "pending after the requeue", lambda f: f.get("JobState") == "PENDING", 120)
        self.cluster.run(["scontrol", "update", f"JobId={job_id}", "BeginTime=now"], check=False)
        self.wait_job(job_id, "completion", lambda f: f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"), 300)
        final = self.cluster.job(job_id)
        self.assertEqual(final.get("JobState"), "COMPLETED", f"{final}\n{self.output()}")

        self.assertEqual((self.dir / "result.txt").read_text().strip(), self.D, self.output())
        attempts = read_attempts(self.dir / "state")
        self.assertEqual([a.get("slurm_restart_count") for a in attempts], [0, 1], attempts)
        self.assertEqual(attempts[0]["outcome"], "stopped", attempts)
        self.assertIsNotNone(attempts[1].get("resume_step"), attempts)
        log = self.output()
        self.assertIn("restart_count=1", log)  # event=slurm_job of the second run
        self.assertEqual(len(events(log, "slurm_output_truncated_on_requeue")), 0, "--open-mode=append was given")


if __name__ == "__main__":
    unittest.main()
