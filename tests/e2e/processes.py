"""Processes of the end-to-end tests: `spotvisor run` and `spotvisor mock-metadata` as
subprocesses, and reading what they leave (the text log's event lines, state.json,
attempts.jsonl). Imported through tests/e2e/support.py, which re-exports every name.

Waiting is always a poll with a deadline (the machine may be slow and shared, and
SPOTVISOR_E2E_SLOW multiplies every deadline); a failed wait names what it waited for and
shows the tail of the supervisor's log.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

SLOW = float(os.environ.get("SPOTVISOR_E2E_SLOW", "1") or "1")


def deadline(seconds: float) -> float:
    return time.monotonic() + seconds * SLOW


_HANDED_OUT: set = set()


def free_port() -> int:
    """A loopback TCP port for a server the test starts (etcd, torchrun's store, slurmctld).

    Drawn below the kernel's ephemeral range, which bind(0) and every outgoing connection
    take from: once checked free here, no client socket of another process is handed it
    before the server binds it. Never the same port twice in one test process: a port checked
    free stays free until its server binds it, so two draws in a row could otherwise return
    it twice (the C++ tests' etcd cluster did once)."""
    try:
        below = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        below = 32768
    low = max(1024, below - 12000)
    for _ in range(200):
        port = random.randint(low, below - 1) if below - low >= 1000 else 0
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free loopback port in 200 tries")


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment for spotvisor and trainers: no SPOTVISOR_* or proxies leaking in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SPOTVISOR_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


class Supervisor:
    """One `spotvisor run`, stdout+stderr (the trainer's too) into a file. It stays in the
    test's process group, so whatever kills a hung test (ctest's timeout) takes it along;
    its trainer, in a group of its own, dies with it (PDEATHSIG; not torch 2.x's torchrun
    workers, each in a session of its own: E2ECase's cleanup kills those)."""

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

    def wait_event(self, name: str, timeout: float = 120, where=lambda e: True, *, after: int = 0) -> Dict[str, str]:
        """The first `event=NAME` line at or after offset `after` whose fields satisfy `where`,
        polling."""
        end = deadline(timeout)
        while True:
            exited = self.proc.poll() is not None
            for e in events(self.text()[after:], name):
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
    """`spotvisor mock-metadata --provider P --listen 127.0.0.1:0 --port-file F`; `prefix`
    runs it under another command (`ip netns exec NS`: another host's loopback)."""

    def __init__(self, binary: str, provider: str, workdir: Path, prefix: Sequence[str] = ()) -> None:
        self.provider = provider
        port_file = workdir / f"mock-{provider}.port"
        self.log_path = workdir / f"mock-{provider}.log"
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*prefix, binary, "mock-metadata", "--provider", provider, "--listen", "127.0.0.1:0",
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
