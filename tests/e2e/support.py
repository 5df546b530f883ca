"""Support for spotvisor's end-to-end tests.

The tests drive the REAL `spotvisor` binary (`$SPOTVISOR_BINARY`, else `build/spotvisor`)
and the REAL `spotvisor mock-metadata` server as subprocesses, with real PyTorch trainers
(`/usr/bin/python3`, Debian's python3-torch 1.13, or $SPOTVISOR_E2E_TORCH_PYTHON: see
torch_env.py) as the supervised children. Every test works
in its own temp dir with its own job file (absolute paths to the trainers), its own
checkpoints, state dir and result file; servers listen on 127.0.0.1:0.

Waiting is always a poll with a deadline (the machine may be slow and shared); a failed
wait names what it waited for and shows the tail of the supervisor's log.

Environment:
  SPOTVISOR_BINARY      the spotvisor executable (ctest sets it)
  SPOTVISOR_E2E_TORCH_PYTHON, SPOTVISOR_E2E_TORCH_MAJOR  the trainers' python (torch_env.py)
  SPOTVISOR_E2E_KEEP=1  keep every test's temp dir (they are kept anyway when a test fails)
  SPOTVISOR_E2E_CACHE   where reference digests are cached (default: $TMPDIR/spotvisor-e2e-cache-UID)
  SPOTVISOR_E2E_SLOW    multiply every deadline by this factor (default 1)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from tests.e2e.processes import (SLOW, MockMetadata, Supervisor, clean_env, deadline, events,  # noqa: F401
                                  free_port, parse_fields, pid_alive, read_attempts, read_state)
from tests.e2e.torch_env import (PYTHON, TORCH_VERSION, TORCHRUN, require_torch, require_torchrun,  # noqa: F401
                                 torch_fingerprint, torch_missing_reason, torchrun_missing_reason)

REPO = Path(__file__).resolve().parents[2]
HELPER_DIR = REPO / "python"
TORCH_TRAINER = REPO / "examples" / "torch_trainer" / "train.py"
DIST_WORKER = Path(__file__).resolve().parent / "dist_worker.py"
HF_TRAINER = Path(__file__).resolve().parent / "hf_trainer.py"

# The example trainer's shortened schedule used by every e2e test. The digest does not
# depend on --step-sleep, so interrupt tests may run slower than the reference.
EXAMPLE_ARGS = ["--steps", "40", "--checkpoint-every", "10", "--keep", "0", "--seed", "1234"]
# The in-place Hugging Face-style trainer (tests/e2e/hf_trainer.py).
HF_ARGS = ["--steps", "30", "--save-steps", "5", "--seed", "7"]


# ---------------------------------------------------------------------------------------
# What this machine has

def spotvisor_binary() -> Optional[str]:
    path = os.environ.get("SPOTVISOR_BINARY")
    if path:
        return os.path.abspath(path) if os.access(path, os.X_OK) else None
    fallback = REPO / "build" / "spotvisor"
    return str(fallback) if os.access(fallback, os.X_OK) else None


# ---------------------------------------------------------------------------------------
# Job files (YAML written as JSON-flow values, which YAML reads as they are)

def write_job(path: Path, *, name: str, command: Sequence[str], resume_args: Sequence[str],
              pattern: str, provider: str = "none", endpoint: Optional[str] = None,
              poll_interval: str = "200ms", grace: str = "30s", fmt: Optional[str] = None,
              keep: int = 0, result_file: Optional[str] = "./result.txt",
              crash_loop_failures: int = 20, target: Optional[str] = None, extra: str = "",
              env: Optional[Dict[str, str]] = None) -> Path:
    """A job file; `target` None leaves signals.target at its default (auto), `extra` is
    appended as it is (more sections), `env` adds to job.env."""
    j = json.dumps
    lines = [
        "# written by tests/e2e (spotvisor end-to-end tests)",
        "job:",
        f"  name: {j(name)}",
        f"  command: {j(list(map(str, command)))}",
        f"  resume_args: {j(list(resume_args))}",
        "  workdir: .",
        # faulthandler: a worker sent SIGABRT prints every thread's stack (see worker_stacks).
        f"  env: {j({'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'PYTHONFAULTHANDLER': '1', **(env or {})})}",
        "  success_exit_codes: [0]",
    ]
    if result_file:
        lines.append(f"  result_file: {j(result_file)}")
    lines += ["provider:", f"  kind: {provider}"]
    if endpoint:
        lines += [f"  endpoint: {j(endpoint)}", f"  poll_interval: {poll_interval}",
                  "  request_timeout: 2s", "  resume_after: 10m"]
    lines += [
        "signals:", "  on_notice: SIGTERM", "  checkpoint: SIGUSR1", *([f"  target: {target}"] if target else []),
        f"  grace: {grace}",
        "checkpoints:", "  dir: ./ckpt", f"  pattern: {j(pattern)}", "  validate: full", f"  keep: {keep}",
    ]
    if fmt:
        lines.append(f"  format: {fmt}")
    lines += [
        "restart:", "  max_restarts: 20",
        "  backoff: {initial: 100ms, max: 1s, multiplier: 2, jitter: 0}",
        f"  crash_loop: {{failures: {crash_loop_failures}, window: 10m}}",
        "telemetry:", "  state_dir: ./state", "  log_format: text",
    ]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def example_command(*, step_sleep: float, torchrun: bool = False) -> List[str]:
    trainer = ["--ckpt-dir", "{checkpoint_dir}", "--result-file", "{result_file}", *EXAMPLE_ARGS,
               "--step-sleep", str(step_sleep)]
    if torchrun:
        return [*TORCHRUN, str(TORCH_TRAINER), *trainer]
    return [PYTHON, str(TORCH_TRAINER), *trainer]


def hf_command(*, step_sleep: float, write_sleep: float) -> List[str]:
    return [PYTHON, str(HF_TRAINER), "--output-dir", "{checkpoint_dir}", "--result-file", "{result_file}",
            *HF_ARGS, "--step-sleep", str(step_sleep), "--write-sleep", str(write_sleep)]


# ---------------------------------------------------------------------------------------
# Reference digests: the trainer run directly, uninterrupted, without spotvisor. Cached
# by the contents of everything that decides the result (trainer, helper, torch version,
# arguments), so a rerun of the suite does not pay for them again.

def _cache_dir() -> Path:
    d = os.environ.get("SPOTVISOR_E2E_CACHE") or os.path.join(tempfile.gettempdir(),
                                                               f"spotvisor-e2e-cache-{os.getuid()}")
    return Path(d)


def _fingerprint(files: Iterable[Path], argv: Sequence[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(set(files)):
        h.update(str(f).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(torch_fingerprint())   # the trainers' python and torch, not this runner's
    h.update(json.dumps(list(argv)).encode())
    return h.hexdigest()[:32]


def reference_digest(kind: str) -> str:
    """The uninterrupted digest of `example`, `torchrun` or `hf`."""
    work = Path(tempfile.mkdtemp(prefix=f"spotvisor-e2e-ref-{kind}-"))
    try:
        ckpt, result = work / "ckpt", work / "result.txt"
        sources = list(HELPER_DIR.rglob("*.py")) + [TORCH_TRAINER]
        if kind == "example":
            argv = [PYTHON, str(TORCH_TRAINER), "--ckpt-dir", str(ckpt), "--result-file", str(result),
                    *EXAMPLE_ARGS]
        elif kind == "torchrun":
            argv = [*TORCHRUN, str(TORCH_TRAINER), "--ckpt-dir", str(ckpt), "--result-file", str(result),
                    *EXAMPLE_ARGS]
        elif kind == "hf":
            argv = [PYTHON, str(HF_TRAINER), "--output-dir", str(ckpt), "--result-file", str(result), *HF_ARGS]
            sources = [HF_TRAINER]
        else:
            raise ValueError(kind)
        key = _fingerprint(sources, [a.replace(str(work), "WORK") for a in argv])
        cached = _cache_dir() / f"{kind}-{key}.digest"
        if cached.exists():
            text = cached.read_text().strip()
            if re.fullmatch(r"[0-9a-f]{64}", text):
                return text
        proc = subprocess.run(argv, cwd=work, env=clean_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=600 * SLOW)
        if proc.returncode != 0 or not result.exists():
            raise AssertionError(f"reference run of {kind} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
        digest = result.read_text().strip()
        _cache_dir().mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(cached.name + f".{os.getpid()}.tmp")
        tmp.write_text(digest + "\n")
        os.replace(tmp, cached)
        return digest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def trainer_strays(workdir: Path, more_names: Sequence[str] = ()) -> List[int]:
    """Live trainer processes (the example trainer, dist_worker.py, torchrun, and any whose
    command line names one of `more_names`) whose working directory is under `workdir`: the
    job's workdir, so no other test's."""
    root = os.path.realpath(workdir)
    names = (str(TORCH_TRAINER), str(DIST_WORKER), "torch.distributed.run", "torchrun", *more_names)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd == root or cwd.startswith(root + "/")) and any(n in cmd for n in names) and pid_alive(int(entry)):
            out.append(int(entry))
    return out


# ---------------------------------------------------------------------------------------
# The base test case

class NeedsTorchrun:
    """Mixin before an E2ECase: the class skips itself without torchrun and gloo (fails
    when SPOTVISOR_E2E_TORCH_PYTHON asked for them)."""

    @classmethod
    def setUpClass(cls) -> None:
        require_torchrun()
        super().setUpClass()


class E2ECase(unittest.TestCase):
    """A temp dir per test; every process started through it is stopped at the end."""

    needs_torch = True
    trainer_names: Sequence[str] = ()  # more trainers' scripts, for trainer_strays


    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.binary = spotvisor_binary()
        if cls.binary is None:
            raise unittest.SkipTest("no spotvisor binary: set SPOTVISOR_BINARY (ctest does) or build build/spotvisor")
        if cls.needs_torch:
            require_torch()

    def setUp(self) -> None:
        self.started = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix=f"spotvisor-e2e-{self._testMethodName}-"))
        self._supervisors: List[Supervisor] = []
        self._mocks: List[MockMetadata] = []
        self.addCleanup(self._cleanup)

    def _cleanup(self) -> None:
        # Exited by themselves: a SIGKILLed spotvisor (here, or by the test) cannot clean up.
        on_their_own = all(sv.proc.poll() is not None and sv.proc.returncode != -signal.SIGKILL
                           for sv in self._supervisors)
        for sv in self._supervisors:
            sv.kill()
        for mock in self._mocks:
            mock.stop()
        # After our SIGKILL of a spotvisor, torch 2.x's workers outlive it (each in a session
        # of its own, no PDEATHSIG); after a spotvisor that exited by itself, none may.
        strays = trainer_strays(self.dir, self.trainer_names)
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        failed = self._failed() or bool(strays and on_their_own)
        if failed or os.environ.get("SPOTVISOR_E2E_KEEP") == "1":
            print(f"\n[e2e] {self.id()}: kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if strays and on_their_own and self._supervisors:
            raise AssertionError(f"trainer processes outlived spotvisor's exit (SIGKILLed now): {strays}")

    def _failed(self) -> bool:
        outcome = getattr(self, "_outcome", None)
        result = getattr(outcome, "result", None)
        if result is None:
            return True
        for test, _ in list(getattr(result, "failures", [])) + list(getattr(result, "errors", [])):
            if test is self:
                return True
        return not getattr(outcome, "success", True)

    # -- helpers --
    def supervise(self, config: Path, name: str, extra: Sequence[str] = ()) -> Supervisor:
        sv = Supervisor(self.binary, config, self.dir / f"{name}.log", extra)
        self._supervisors.append(sv)
        return sv

    def mock(self, provider: str) -> MockMetadata:
        mock = MockMetadata(self.binary, provider, self.dir)
        self._mocks.append(mock)
        return mock

    def result_of(self, workdir: Optional[Path] = None) -> str:
        path = (workdir or self.dir) / "result.txt"
        self.assertTrue(path.exists(), f"no result file {path}")
        return path.read_text().strip()

    def assert_exit(self, sv: Supervisor, code: int, timeout: float = 240) -> None:
        rc = sv.wait(timeout)
        self.assertEqual(rc, code, f"spotvisor exited {rc}, expected {code}; log {sv.log_path}:\n{sv.tail()}")

    def trainer_pid(self, sv: Supervisor, attempt: int, timeout: float = 120) -> int:
        """The pid of attempt `attempt`'s trainer, from the log, cross-checked with state.json."""
        pid = int(sv.wait_event("trainer_started", timeout, lambda e: e.get("attempt") == str(attempt))["pid"])
        state = read_state(self.dir / "state")
        if state and state.get("child") and state.get("attempts") == attempt:
            self.assertEqual(state["child"]["pid"], pid, "state.json child.pid disagrees with the log")
        return pid
