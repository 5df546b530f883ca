"""A real S3-protocol server for the tests: moto's (the server many S3 clients, boto among
them, are tested against), reached by rclone's S3 backend as a cloud bucket would be.

Standard library only: the tests import it under /usr/bin/python3, which has no moto. The
server runs as a child process under the s3 environment's python (scripts/layered-env.sh
s3-env; ctest passes it as SPOTVISOR_S3_PYTHON), as tests/e2e/moto_s3_server.py, which
binds a free port itself and writes it to a file (no race for the port), and can be told to
fail every request with a status (fail_with). moto keeps its data in that process's memory:
a restarted server would have lost it, so a stall is pause()/resume() (SIGSTOP/SIGCONT)
rather than a restart.

    with S3Server(workdir) as s3:
        s3.rclone("copyto", "local.bin", f"{s3.remote}/run/a.bin")
        s3.list_files("run")            # {"run/a.bin": 5242880}
        s3.fail_with(503); ...; s3.stop_failing()
        env = s3.rclone_env()           # for a process that runs rclone itself (spotvisor)

Waiting is a poll with a deadline; SPOTVISOR_E2E_SLOW multiplies the deadlines as in the
other e2e tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "moto_s3_server.py"
SLOW = float(os.environ.get("SPOTVISOR_E2E_SLOW", "1") or "1")
BUCKET = "spotvisor-test"
REMOTE_NAME = "s3test"
# moto accepts any key pair (it does not check signatures by default).
ACCESS_KEY_ID = "spotvisor-test-key"
SECRET_ACCESS_KEY = "spotvisor-test-secret"
# Variables not passed to rclone: rclone 1.60's S3 backend fails on any request with
# "LoadCustomCABundleError ... unsupported transport" when AWS_CA_BUNDLE is set (some
# machines set it for other tools); proxies must not see a loopback server.
DROPPED = ("AWS_CA_BUNDLE", "http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


class RcloneError(subprocess.CalledProcessError):
    """A failed rclone command; unlike CalledProcessError its message shows rclone's stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr:\n{(self.stderr or '').strip()[-3000:]}"


class S3Server:
    """moto's S3 server on 127.0.0.1, a free port, with bucket `spotvisor-test`, as a context
    manager. Its files (port file, fault file, log, rclone's empty config) go in workdir."""

    def __init__(self, workdir: str, python: Optional[str] = None) -> None:
        self.workdir = Path(workdir)
        if python is None:
            python = os.environ.get("SPOTVISOR_S3_PYTHON", "")
            if not python:
                raise RuntimeError("S3Server: SPOTVISOR_S3_PYTHON is not set: it names the python of the s3 "
                                   "environment, with moto (SPOTVISOR_S3_PYTHON=\"$(scripts/layered-env.sh "
                                   "s3-env | tail -n 1)\"; ctest sets it)")
        if not os.access(python, os.X_OK):
            raise RuntimeError(f"S3Server: the s3 environment's python {python} does not exist or cannot "
                               f"run: make it with scripts/layered-env.sh s3-env")
        self.python = python
        self.rclone_binary = shutil.which("rclone")
        if self.rclone_binary is None:
            raise RuntimeError("S3Server: no rclone on PATH (Debian's package rclone; scripts/setup.sh installs it)")
        self.port_file = self.workdir / "s3-port"
        self.fault_file = self.workdir / "s3-fault"
        self.log_path = self.workdir / "s3-server.log"
        self.rclone_config = self.workdir / "rclone.conf"
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self.paused = False

    # -- lifecycle --
    def __enter__(self) -> "S3Server":
        self.workdir.mkdir(parents=True, exist_ok=True)
        for stale in (self.port_file, self.fault_file):
            stale.unlink(missing_ok=True)
        # An empty config of its own: the remote is all in the environment (rclone_env), and
        # no user's rclone.conf (a [s3test] section, say) can add to it.
        self.rclone_config.write_text("")
        self._launch(0)
        return self

    def _launch(self, port: int) -> None:
        """The server on `port` (0: a free one), answering, with the bucket made."""
        with open(self.log_path, "ab") as log:
            # In the test's process group, so whatever kills a hung test takes it along; it
            # also dies with its parent (PDEATHSIG, set by the script).
            self.proc = subprocess.Popen(
                [self.python, str(SERVER_SCRIPT), "--host", "127.0.0.1", "--port", str(port),
                 "--port-file", str(self.port_file), "--fault-file", str(self.fault_file)],
                cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
            self.rclone("mkdir", self.remote)
        except BaseException:
            self._stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        if self.paused:  # a stopped process acts on the SIGTERM once continued
            proc.send_signal(signal.SIGCONT)
            self.paused = False
        try:
            proc.wait(timeout=10 * SLOW)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _wait_ready(self) -> None:
        """Until the port file is written and the server answers HTTP (any status counts)."""
        assert self.proc is not None
        deadline = time.monotonic() + 60 * SLOW
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"S3Server: moto's server ({self.python} {SERVER_SCRIPT}) exited "
                                   f"{self.proc.returncode} before it answered:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"S3Server: moto's server did not answer within {60 * SLOW:.0f} s:\n"
                                   f"{self.log_tail()}")
            if not self.port:
                try:
                    self.port = int(self.port_file.read_text())
                except (FileNotFoundError, ValueError):
                    time.sleep(0.05)
                    continue
            try:
                opener.open(self.endpoint + "/", timeout=5).close()
                return
            except urllib.error.HTTPError:
                return  # an answer
            except OSError:
                time.sleep(0.05)

    # -- where it is --
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def remote(self) -> str:
        return f"{REMOTE_NAME}:{BUCKET}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("S3Server: not running (use it as a context manager)")
        return self.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- rclone --
    def rclone_env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """base (default: this process's environment) with the remote `s3test` pointing at
        this server, and without AWS_CA_BUNDLE or proxies (see DROPPED)."""
        env = {k: v for k, v in (os.environ if base is None else base).items()
               if k not in DROPPED and not k.startswith(f"RCLONE_CONFIG_{REMOTE_NAME.upper()}_")}
        prefix = f"RCLONE_CONFIG_{REMOTE_NAME.upper()}_"
        env.update({
            "RCLONE_CONFIG": str(self.rclone_config),
            prefix + "TYPE": "s3",
            prefix + "PROVIDER": "Other",
            prefix + "ENDPOINT": self.endpoint,
            prefix + "REGION": "us-east-1",
            prefix + "ACCESS_KEY_ID": ACCESS_KEY_ID,
            prefix + "SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            prefix + "FORCE_PATH_STYLE": "true",
        })
        return env

    def rclone(self, *args: str, check: bool = True, timeout: Optional[float] = 120) -> subprocess.CompletedProcess:
        """`rclone ARGS -q` against this server; stdout and stderr as text (read a binary
        object with copyto). check: raise RcloneError (with rclone's stderr) on a non-zero
        exit. timeout (seconds, times SPOTVISOR_E2E_SLOW; None: none) bounds a call that a
        paused server would otherwise hang."""
        cmd = [self.rclone_binary or "rclone", *args, "-q"]
        result = subprocess.run(cmd, env=self.rclone_env(), stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=None if timeout is None else timeout * SLOW)
        if check and result.returncode != 0:
            raise RcloneError(result.returncode, cmd, result.stdout, result.stderr)
        return result

    def list_files(self, prefix: str = "") -> Dict[str, int]:
        """Every object under the folder `prefix` of the bucket (all of it by default): its
        path from the bucket's root -> its size. {} when there is no such folder."""
        prefix = prefix.strip("/")
        target = f"{self.remote}/{prefix}" if prefix else self.remote
        result = self.rclone("lsjson", "-R", "--files-only", target, check=False)
        if result.returncode == 3:  # rclone's "directory not found"
            return {}
        if result.returncode != 0:
            raise RcloneError(result.returncode, ["rclone", "lsjson", "-R", "--files-only", target],
                              result.stdout, result.stderr)
        entries: List[dict] = json.loads(result.stdout or "[]")
        return {(f"{prefix}/{e['Path']}" if prefix else e["Path"]): int(e["Size"]) for e in entries}

    # -- faults --
    def fail_with(self, status: int) -> None:
        """From the next request on, every request is answered with this HTTP status (an
        S3-style XML error; 503 is S3's SlowDown), until stop_failing(). moto's data stays."""
        if not 400 <= status <= 599:
            raise ValueError(f"S3Server.fail_with: {status} is not an error status (400..599)")
        tmp = self.fault_file.with_name(self.fault_file.name + ".tmp")
        tmp.write_text(f"{status}\n")
        os.replace(tmp, self.fault_file)  # the server never reads half a file

    def stop_failing(self) -> None:
        self.fault_file.unlink(missing_ok=True)

    def pause(self) -> None:
        """A stall: SIGSTOP the server. Connections are still accepted (by the kernel) but
        nothing is answered until resume()."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def crash(self) -> None:
        """The server dies (SIGKILL) in the middle of whatever it was doing: connections are
        cut, new ones refused, until restart()."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.paused = False

    def restart(self) -> None:
        """A new server on the same port, with the bucket made again. moto keeps objects in
        memory, so the new one starts empty: what the old one held is gone."""
        self.port_file.unlink(missing_ok=True)
        self._launch(self.port)
