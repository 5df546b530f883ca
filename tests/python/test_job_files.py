"""The example job files use spotvisor's fixed-core keys, and their commands work when a
test expands the templates the way spotvisor does (argv, no shell; relative paths against
the job file's directory; resume_args appended only when resuming)."""

import os
import signal
import sys
import tempfile
import unittest
from pathlib import Path

import harness
from harness import TrainerProcess, digest_of, run_to_end
from test_examples import TORCHRUN_ARGS

JOBS = {
    "plain": harness.EXAMPLES / "plain_trainer" / "job.yaml",
    "torch": harness.EXAMPLES / "torch_trainer" / "job.yaml",
    "torchrun": harness.EXAMPLES / "torch_trainer" / "torchrun_job.yaml",
}


def load(path: Path) -> dict:
    import yaml
    with open(path) as f:
        return yaml.safe_load(f)


def expand(args, **values):
    out = []
    for arg in args:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", str(value))
        out.append(arg)
    return out


@unittest.skipUnless(harness.HAS_YAML, "PyYAML is not installed")
class JobFileTest(unittest.TestCase):
    def test_fixed_core_keys(self):
        for name, path in JOBS.items():
            with self.subTest(job=name):
                job = load(path)
                torchrun = name == "torchrun"
                self.assertEqual(job["job"]["command"][0], "torchrun" if torchrun else "/usr/bin/python3")
                self.assertIn("{checkpoint_dir}", job["job"]["command"])
                self.assertIn("{result_file}", job["job"]["command"])
                self.assertEqual(job["job"]["resume_args"], ["--resume_from={checkpoint}"])
                self.assertEqual(job["job"]["workdir"], ".")
                self.assertEqual(job["job"]["success_exit_codes"], [0])
                self.assertTrue(job["job"]["result_file"].startswith("./"))
                self.assertEqual(job["provider"]["kind"], "none")
                self.assertEqual(job["signals"]["on_notice"], "SIGTERM")
                self.assertEqual(job["signals"]["checkpoint"], "SIGUSR1")
                self.assertEqual(job["signals"]["target"], "auto")   # workers for torchrun, else group
                self.assertEqual(job["checkpoints"]["pattern"], "ckpt_step{step}")
                self.assertTrue(job["checkpoints"]["dir"].startswith("./"))
                self.assertIn("state_dir", job["telemetry"])
                script = path.parent / job["job"]["command"][1 + (len(TORCHRUN_ARGS) if torchrun else 0)]
                self.assertTrue(script.is_file(), script)
                known = {"job", "provider", "signals", "checkpoints", "health", "telemetry"}
                self.assertLessEqual(set(job), known)

    def test_torchrun_job_matches_the_tested_invocation(self):
        command = load(JOBS["torchrun"])["job"]["command"]
        self.assertEqual(command[0], "torchrun")                  # plain torchrun, as users type it
        self.assertEqual(command[1:1 + len(TORCHRUN_ARGS)], TORCHRUN_ARGS)
        self.assertEqual(command[1 + len(TORCHRUN_ARGS)], "train.py")

    def run_job(self, name, root: Path, *, resume_from=None, interrupt_after=None):
        """Run a job's command as spotvisor would; overrides keep it fast and out of the repo."""
        job = load(JOBS[name])
        ckpt_dir, result = root / "ckpt", root / "result.txt"
        argv = expand(job["job"]["command"], checkpoint_dir=ckpt_dir, result_file=result)
        # Later flags win in argparse: no sleep, heartbeat in the scratch dir.
        argv += ["--step-sleep", "0.04" if interrupt_after else "0",
                 "--heartbeat-file", str(root / "heartbeat")]
        if resume_from is not None:
            argv += expand(job["job"]["resume_args"], checkpoint=resume_from)
        argv[0] = sys.executable
        cwd = (JOBS[name].parent / job["job"]["workdir"]).resolve()
        env = harness.child_env({k: str(v) for k, v in job["job"].get("env", {}).items()})
        if interrupt_after is None:
            return run_to_end(argv, env=env, cwd=cwd)
        with TrainerProcess(argv, env=env, cwd=cwd) as proc:
            proc.wait_for(rf"^step={interrupt_after} ")
            proc.signal_group(signal.SIGTERM)
            self.assertEqual(proc.wait(), 0)
            return proc

    def check_job(self, name):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            base = digest_of(self.run_job(name, Path(a)))
            self.assertEqual((Path(a) / "result.txt").read_text(), base + "\n")
            self.assertTrue((Path(a) / "heartbeat").exists())
            stopped = self.run_job(name, Path(b), interrupt_after=10)
            step = int(stopped.wait_for(r"stopping step=(\d+)", 1).group(1))
            resumed = self.run_job(name, Path(b), resume_from=Path(b) / "ckpt" / f"ckpt_step{step}")
            self.assertEqual(digest_of(resumed), base)
            # The job passes --keep 0: retention is spotvisor's (checkpoints.keep).
            names = sorted(os.listdir(Path(b) / "ckpt"))
            self.assertIn(f"ckpt_step{step}", names)

    def test_plain_job_command_resumes_exactly(self):
        self.check_job("plain")

    @unittest.skipUnless(harness.HAS_TORCH and harness.HAS_NUMPY, "torch and numpy are needed")
    def test_torch_job_command_resumes_exactly(self):
        # Interruptions of this trainer are covered in test_examples.py; here the job's
        # own command and resume_args: a full run, then a resume from its step-40 checkpoint.
        with tempfile.TemporaryDirectory() as a:
            root = Path(a)
            base = digest_of(self.run_job("torch", root))
            self.assertEqual((root / "result.txt").read_text(), base + "\n")
            resumed = self.run_job("torch", root, resume_from=root / "ckpt" / "ckpt_step40")
            resumed.wait_for(r"resumed from=.*ckpt_step40 step=40 rng=yes", 1)
            self.assertEqual(digest_of(resumed), base)


if __name__ == "__main__":
    unittest.main()
