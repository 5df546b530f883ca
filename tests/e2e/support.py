"""Support for spotvisor's end-to-end tests.

The tests drive the REAL `spotvisor` binary (`$SPOTVISOR_BINARY`, else `build/spotvisor`)
and the REAL `spotvisor mock-metadata` server as subprocesses, with real PyTorch trainers
(`/usr/bin/python3`, Debian's python3-torch) as the supervised children. Every test works
in its own temp dir with its own job file (absolute paths to the trainers), its own
checkpoints, state dir and result file; servers listen on 127.0.0.1:0.

Waiting is always a poll with a deadline (the machine may be slow and shared); a failed
wait names what it waited for and shows the tail of the supervisor's log.

Environment:
  SPOTVISOR_BINARY      the spotvisor executable (ctest sets it)
  SPOTVISOR_E2E_KEEP=1  keep every test's temp dir (they are kept anyway when a test fails)
  SPOTVISOR_E2E_CACHE   where reference digests are cached (default: $TMPDIR/spotvisor-e2e-cache-UID)
  SPOTVISOR_E2E_SLOW    multiply every deadline by this factor (default 1)
"""

from __future__ import annotations

import hashlib
import importlib.util
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
import urllib.request
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"
HELPER_DIR = REPO / "python"
TORCH_TRAINER = REPO / "examples" / "torch_trainer" / "train.py"
DIST_WORKER = Path(__file__).resolve().parent / "dist_worker.py"
# Plain torchrun as users type it (Debian's python3-torch installs /usr/bin/torchrun). Under
# Python 3.11, torch 1.13 needs --redirects 1 --tee 1; --standalone picks a free port.
TORCHRUN = ["torchrun", "--standalone", "--nproc_per_node=2", "--redirects", "1", "--tee", "1",
            "--monitor_interval", "0.5"]
HF_TRAINER = Path(__file__).resolve().parent / "hf_trainer.py"

SLOW = float(os.environ.get("SPOTVISOR_E2E_SLOW", "1") or "1")

# The example trainer's shortened schedule used by every e2e test. The digest does not
# depend on --step-sleep, so interrupt tests may run slower than the reference.
EXAMPLE_ARGS = ["--steps", "40", "--checkpoint-every", "10", "--keep", "0", "--seed", "1234"]
# The in-place Hugging Face-style trainer (tests/e2e/hf_trainer.py).
HF_ARGS = ["--steps", "30", "--save-steps", "5", "--seed", "7"]


def deadline(seconds: float) -> float:
    return time.monotonic() + seconds * SLOW


# ---------------------------------------------------------------------------------------
# What this machine has

def spotvisor_binary() -> Optional[str]:
    path = os.environ.get("SPOTVISOR_BINARY")
    if path:
        return os.path.abspath(path) if os.access(path, os.X_OK) else None
    fallback = REPO / "build" / "spotvisor"
    return str(fallback) if os.access(fallback, os.X_OK) else None


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def torch_missing_reason() -> Optional[str]:
    """None when /usr/bin/python3 (which runs every trainer) has torch and NumPy."""
    if not os.access(PYTHON, os.X_OK):
        return f"{PYTHON} not found (the trainers run with Debian's python3 and python3-torch)"
    if Path(sys.executable).resolve() == Path(PYTHON).resolve():
        ok = _has("torch") and _has("numpy")
    else:
        ok = _python_ok("import torch, numpy")
    return None if ok else (f"{PYTHON} cannot import torch and NumPy "
                            f"(Debian: apt-get install python3-torch python3-numpy)")


def _python_ok(code: str) -> bool:
    try:
        return subprocess.run([PYTHON, "-c", code], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def torchrun_missing_reason() -> Optional[str]:
    if not _python_ok("import torch.distributed as d, torch.distributed.run; "
                      "assert d.is_available() and d.is_gloo_available()"):
        return f"torchrun with the gloo backend is not available to {PYTHON}"
    return None


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment for spotvisor and trainers: no SPOTVISOR_* or proxies leaking in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SPOTVISOR_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------
# Job files (YAML written as JSON-flow values, which YAML reads as they are)

def write_job(path: Path, *, name: str, command: Sequence[str], resume_args: Sequence[str],
              pattern: str, provider: str = "none", endpoint: Optional[str] = None,
              poll_interval: str = "200ms", grace: str = "30s", fmt: Optional[str] = None,
              keep: int = 0, result_file: Optional[str] = "./result.txt",
              crash_loop_failures: int = 20, target: Optional[str] = None, extra: str = "") -> Path:
    """A job file; `target` None leaves signals.target at its default (auto), `extra` is
    appended as it is (more sections)."""
    j = json.dumps
    lines = [
        "# written by tests/e2e (spotvisor end-to-end tests)",
        "job:",
        f"  name: {j(name)}",
        f"  command: {j(list(map(str, command)))}",
        f"  resume_args: {j(list(resume_args))}",
        "  workdir: .",
        # faulthandler: a worker sent SIGABRT prints every thread's stack (see worker_stacks).
        f"  env: {j({'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1', 'PYTHONFAULTHANDLER': '1'})}",
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
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        version = Path(spec.origin).parent / "version.py"
        if version.exists():
            h.update(version.read_bytes())
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


# ---------------------------------------------------------------------------------------
# Processes

class Supervisor:
    """One `spotvisor run`, stdout+stderr (the trainer's too) into a file. It stays in the
    test's process group, so whatever kills a hung test (ctest's timeout) takes it along;
    its trainer, in a group of its own, dies with it (PDEATHSIG)."""

    def __init__(self, binary: str, config: Path, log: Path, extra: Sequence[str] = ()) -> None:
        self.log_path = log
        self.config = config
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([binary, "run", "--config", str(config), *extra],
                                         cwd=config.parent, env=clean_env(), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def worker_stacks(self) -> str:
        """Where the workers of the last `target=workers` signal are: each is sent SIGABRT,
        on which faulthandler (on in every job) prints all its threads' Python stacks to
        its stderr, which is the log. Returns the log's tail after; for a failure message
        about a save that never came."""
        sent = [e for e in events(self.text(), "signal_sent") if e.get("target") == "workers" and e.get("workers")]
        if not sent:
            return self.tail()
        for pid in sent[-1]["workers"].split(","):
            try:
                os.kill(int(pid), signal.SIGABRT)
            except (ProcessLookupError, ValueError):
                pass
        time.sleep(3)
        return self.tail(200)

    def wait_for(self, pattern: str, timeout: float = 120, *, after: int = 0,
                 flags: int = re.MULTILINE) -> "re.Match[str]":
        """The first match of `pattern` in the log at or after offset `after`, polling."""
        regex = re.compile(pattern, flags)
        end = deadline(timeout)
        while True:
            exited = self.proc.poll() is not None
            match = regex.search(self.text(), after)
            if match:
                return match
            if exited:
                raise AssertionError(f"spotvisor exited ({self.proc.returncode}) without a line "
                                     f"matching {pattern!r}; log {self.log_path}:\n{self.tail()}")
            if time.monotonic() > end:
                raise AssertionError(f"no line matching {pattern!r} within {timeout * SLOW:.0f}s; "
                                     f"log {self.log_path}:\n{self.tail()}")
            time.sleep(0.05)

    def wait_event(self, name: str, timeout: float = 120, where=lambda e: True) -> Dict[str, str]:
        """The first `event=NAME` line whose fields satisfy `where`, polling."""
        end = deadline(timeout)
        while True:
            exited = self.proc.poll() is not None
            for e in events(self.text(), name):
                if where(e):
                    return e
            if exited or time.monotonic() > end:
                why = f"spotvisor exited ({self.proc.returncode})" if exited else f"{timeout * SLOW:.0f}s passed"
                raise AssertionError(f"{why} without a matching event={name}; log {self.log_path}:\n{self.tail()}")
            time.sleep(0.05)

    def events(self, name: str) -> List[Dict[str, str]]:
        return events(self.text(), name)

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"spotvisor did not exit within {timeout * SLOW:.0f}s; "
                                 f"log {self.log_path}:\n{self.tail()}") from None

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL (the trainer dies with it: PDEATHSIG) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass


class MockMetadata:
    """`spotvisor mock-metadata --provider P --listen 127.0.0.1:0 --port-file F`."""

    def __init__(self, binary: str, provider: str, workdir: Path) -> None:
        self.provider = provider
        port_file = workdir / f"mock-{provider}.port"
        self.log_path = workdir / f"mock-{provider}.log"
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [binary, "mock-metadata", "--provider", provider, "--listen", "127.0.0.1:0",
                 "--port-file", str(port_file)],
                env=clean_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        end = deadline(30)
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise AssertionError(f"mock-metadata did not start: {self.log_path.read_text()}")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, path: str, body: Optional[dict] = None) -> str:
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(self.url + path, data=data if method == "POST" else None, method=method)
        with self._opener.open(req, timeout=10) as resp:
            return resp.read().decode()

    def preempt(self, **spec) -> None:
        self._request("POST", "/__spotvisor/preempt", spec or None)

    def clear(self) -> None:
        self._request("POST", "/__spotvisor/clear")

    def state(self) -> str:
        return self._request("GET", "/__spotvisor/state")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_fields(line: str) -> Dict[str, str]:
    """key=value fields of one spotvisor text log line (values unquoted)."""
    out: Dict[str, str] = {}
    for key, value in _FIELD.findall(line):
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = re.sub(r'\\(.)', r'\1', value[1:-1])
        out.setdefault(key, value)
    return out


def events(text: str, name: str) -> List[Dict[str, str]]:
    """Every `event=NAME` line of a spotvisor log, parsed."""
    return [parse_fields(line) for line in text.splitlines()
            if " spotvisor " in line and re.search(rf"\bevent={re.escape(name)}(\s|$)", line)]


def read_state(state_dir: Path) -> Optional[dict]:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_attempts(state_dir: Path) -> List[dict]:
    try:
        text = (state_dir / "attempts.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# ---------------------------------------------------------------------------------------
# The base test case

class NeedsTorchrun:
    """Mixin before an E2ECase: the class skips itself without torchrun and gloo."""

    @classmethod
    def setUpClass(cls) -> None:
        reason = torchrun_missing_reason()
        if reason:
            raise unittest.SkipTest(reason)
        super().setUpClass()


class E2ECase(unittest.TestCase):
    """A temp dir per test; every process started through it is stopped at the end."""

    needs_torch = True

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.binary = spotvisor_binary()
        if cls.binary is None:
            raise unittest.SkipTest("no spotvisor binary: set SPOTVISOR_BINARY (ctest does) or build build/spotvisor")
        if cls.needs_torch:
            reason = torch_missing_reason()
            if reason:
                raise unittest.SkipTest(reason)

    def setUp(self) -> None:
        self.started = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix=f"spotvisor-e2e-{self._testMethodName}-"))
        self._supervisors: List[Supervisor] = []
        self._mocks: List[MockMetadata] = []
        self.addCleanup(self._cleanup)

    def _cleanup(self) -> None:
        for sv in self._supervisors:
            sv.kill()
        for mock in self._mocks:
            mock.stop()
        failed = self._failed()
        if failed or os.environ.get("SPOTVISOR_E2E_KEEP") == "1":
            print(f"\n[e2e] {self.id()}: kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

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
