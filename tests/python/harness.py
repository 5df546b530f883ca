"""Shared test support: paths, optional-dependency checks, and a trainer process that a
test drives the way spotvisor would (own process group, signals, output lines)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
EXAMPLES = REPO / "examples"
TORCH_TRAINER = EXAMPLES / "torch_trainer" / "train.py"
PLAIN_TRAINER = EXAMPLES / "plain_trainer" / "train.py"

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


HAS_TORCH = has_module("torch")
HAS_NUMPY = has_module("numpy")
HAS_YAML = has_module("yaml")


def find_spotvisor() -> Optional[Path]:
    """The built binary: $SPOTVISOR_BINARY, else <repo>/build/spotvisor; None when neither."""
    explicit = os.environ.get("SPOTVISOR_BINARY")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    default = REPO / "build" / "spotvisor"
    return default if os.access(default, os.X_OK) else None


def child_env(extra: Optional[dict] = None) -> dict:
    """The environment for a child: the helper importable, no SPOTVISOR_* leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTVISOR_")}
    env["PYTHONPATH"] = str(PYTHON_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def handles(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (SigCgt in its status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return False


class TrainerProcess:
    """A child in its own process group whose output lines are collected as they come."""

    def __init__(self, argv: Sequence[str], *, env: Optional[dict] = None,
                 cwd: Optional[os.PathLike] = None) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env if env is not None else child_env(), cwd=cwd, start_new_session=True)
        self.lines: List[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> "re.Match[str]":
        """The first output line matching `pattern` (searched), waiting up to `timeout`."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    match = regex.search(line)
                    if match:
                        return match
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} within {timeout}s; "
                        f"exit={self.proc.poll()}; output:\n{self.output_tail()}")
                self._cond.wait(min(left, 0.2))

    def output_tail(self, lines: int = 40) -> str:
        return "\n".join(self.lines[-lines:])

    def signal_group(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def signal_children(self, signum: int, *, only_handlers: bool = False) -> int:
        """`signum` to the child's own children (a launcher's workers); how many got it.
        `only_handlers`: skip a child that has no handler for it yet (as spotvisor does)."""
        sent = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, IndexError, ProcessLookupError):
                continue
            if fields[0] == "Z" or int(fields[1]) != self.proc.pid:
                continue
            if only_handlers and not handles(int(entry), signum):
                continue
            try:
                os.kill(int(entry), signum)
            except ProcessLookupError:
                continue
            sent += 1
        return sent

    def wait(self, timeout: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.argv[:3]} did not exit within {timeout}s:\n{self.output_tail()}")
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "TrainerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def run_to_end(argv: Sequence[str], *, env: Optional[dict] = None, cwd=None,
               timeout: float = 120.0) -> TrainerProcess:
    with TrainerProcess(argv, env=env, cwd=cwd) as proc:
        rc = proc.wait(timeout)
        if rc != 0:
            raise AssertionError(f"{' '.join(map(str, argv))} exited {rc}:\n{proc.output_tail()}")
        return proc


def digest_of(proc: TrainerProcess) -> str:
    return proc.wait_for(r"\[trainer\] done step=\d+ digest=([0-9a-f]{64})", 1).group(1)
