"""Helpers shared by the package tests (tests/package/): where the release artifacts are,
finding one, running a command with a deadline, and a throwaway Debian 12 root to install
them into.

Artifacts come from $SPOTVISOR_DIST (default: <repo>/dist). When SPOTVISOR_DIST is set, a
missing artifact fails the test; with the default directory it skips it (nothing was
built). Every command runs with a timeout; a failed or timed-out one raises CommandFailed
with the command and its output.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

REPO = Path(__file__).resolve().parents[2]
DEBIAN_ROOT_SCRIPT = REPO / "tests" / "package" / "debian_root.sh"
# The environment commands run with inside a root: nothing inherited from this machine.
ROOT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
            "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"}

Cmd = Sequence[Union[str, os.PathLike]]


class CommandFailed(AssertionError):
    """A command exited non-zero or ran past its timeout; the message holds its output."""


def dist_dir() -> Path:
    return Path(os.environ.get("SPOTVISOR_DIST") or REPO / "dist").resolve()


def artifact(pattern: str) -> Path:
    """The one file in dist_dir() matching the glob `pattern` (the newest if several)."""
    found = sorted(dist_dir().glob(pattern), key=lambda p: p.stat().st_mtime)
    if found:
        return found[-1]
    message = f"no {pattern} in {dist_dir()}"
    if os.environ.get("SPOTVISOR_DIST"):
        raise AssertionError(message)
    raise unittest.SkipTest(message + " (set SPOTVISOR_DIST to the directory holding the release artifacts)")


def portable_binary() -> Path:
    """dist's one portable binary, spotvisor-<version>-linux-x86_64."""
    found = sorted(dist_dir().glob("spotvisor-*-linux-x86_64"))
    if len(found) != 1:
        raise AssertionError(f"expected one portable binary spotvisor-<version>-linux-x86_64 in {dist_dir()}, "
                             f"found {[p.name for p in found]}: run scripts/package.sh")
    return found[0]


def version() -> str:
    """The release's version, from the portable binary's name."""
    return portable_binary().name[len("spotvisor-"):-len("-linux-x86_64")]


def run(cmd: Cmd, timeout: float, *, check: bool = True, env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Union[str, os.PathLike]] = None, input: Optional[str] = None) -> subprocess.CompletedProcess:
    """Runs `cmd` (stdout and stderr together in .stdout, text) and returns the result. Raises
    CommandFailed with the output when it times out, or exits non-zero with `check`."""
    argv = [str(a) for a in cmd]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=timeout, env=dict(env) if env is not None else None, cwd=cwd, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
        raise CommandFailed(f"timed out after {timeout:g}s: {' '.join(argv)}\n{tail(out)}") from None
    if check and done.returncode != 0:
        raise CommandFailed(f"exit {done.returncode}: {' '.join(argv)}\n{tail(done.stdout)}")
    return done


def tail(text: str, limit: int = 8000) -> str:
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise unittest.SkipTest(f"needs root: {what}")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise unittest.SkipTest(f"not installed: {' '.join(missing)} (scripts/setup.sh installs them)")


def debian_root_tarball(timeout: float = 1800) -> Path:
    """The cached minimal Debian 12 root (tests/package/debian_root.sh makes it once)."""
    out = run(["bash", DEBIAN_ROOT_SCRIPT], timeout).stdout.strip().splitlines()
    tarball = Path(out[-1]) if out else None
    if tarball is None or not tarball.is_file():
        raise CommandFailed(f"{DEBIAN_ROOT_SCRIPT} printed no tarball path:\n{tail(chr(10).join(out))}")
    return tarball


class DebianRoot:
    """A fresh copy of the cached Debian root in a temp dir, with /proc, /dev and /dev/pts
    mounted, and the host's resolv.conf. Use as a context manager: on exit every process
    still running inside it is killed, every mount is undone (lazily if it is busy) and the
    copy is deleted, unless SPOTVISOR_PACKAGE_KEEP=1."""

    def __init__(self, tarball: Path) -> None:
        self.tarball = tarball
        self.path = Path(tempfile.mkdtemp(prefix="spotvisor-root-"))
        self._mounts: List[Path] = []

    def __enter__(self) -> "DebianRoot":
        try:
            run(["tar", "--numeric-owner", "-xf", self.tarball, "-C", self.path], 300)
            self._mount(["-t", "proc", "proc"], "proc")
            self._mount(["--bind", "/dev"], "dev")
            self._mount(["--bind", "/dev/pts"], "dev/pts")  # apt's log wants a pty
            shutil.copyfile("/etc/resolv.conf", self.path / "etc" / "resolv.conf", follow_symlinks=True)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _mount(self, args: List[str], where: str) -> None:
        target = self.path / where
        target.mkdir(parents=True, exist_ok=True)
        run(["mount", *args, target], 30)
        self._mounts.append(target)

    def host_path(self, inside: str) -> Path:
        """Where the root's absolute path `inside` is on this machine."""
        return self.path / inside.lstrip("/")

    def argv(self, cmd: Cmd, env: Optional[Dict[str, str]] = None) -> List[str]:
        """`cmd` run inside the root with ROOT_ENV (plus `env`): chroot and env exec, so the
        process started with this argv ends up being `cmd` itself (its pid is cmd's)."""
        assignments = [f"{k}={v}" for k, v in {**ROOT_ENV, **(env or {})}.items()]
        return ["chroot", str(self.path), "/usr/bin/env", "-i", *assignments, *[str(a) for a in cmd]]

    def run(self, cmd: Cmd, timeout: float, *, check: bool = True,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        return run(self.argv(cmd, env), timeout, check=check, env=ROOT_ENV)

    def processes(self) -> List[int]:
        """Pids of the processes whose root is this copy."""
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/root") == str(self.path):
                        pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def close(self) -> None:
        for _ in range(3):  # every process in here was started by the test: none may survive it
            pids = self.processes()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        for target in reversed(self._mounts):
            if subprocess.run(["umount", target], capture_output=True, timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", target], capture_output=True, timeout=30)
        self._mounts.clear()
        with open("/proc/self/mounts") as f:
            still = [line.split()[1] for line in f if line.split()[1].startswith(str(self.path) + "/")]
        if still:  # never delete through a mount: that would delete the host's /dev
            raise AssertionError(f"still mounted, {self.path} left in place: {still}")
        if os.environ.get("SPOTVISOR_PACKAGE_KEEP") == "1":
            print(f"kept {self.path} (SPOTVISOR_PACKAGE_KEEP=1)")
            return
        subprocess.run(["rm", "-rf", "--one-file-system", self.path], capture_output=True, timeout=300)


# ---------------------------------------------------------------------------------------
# A short job stopped by a preemption notice: the same scenario for every way spotvisor is
# installed (the .deb in a Debian root, the container image). The trainer runs with the
# python3 and the spotvisor_helper of that installation.

TRAINER = r'''"""The package tests' trainer: counts steps and saves checkpoint-<step> (a small text
file) every 5 steps, on SIGUSR1 (save and go on) and on SIGTERM (save and exit), through
spotvisor_helper, the installed module. Every event is a JSON line in the log file."""
import argparse, json, os, sys, time
from pathlib import Path
from spotvisor_helper import SignalFlags, atomic_write_text

signals = SignalFlags()  # first: until it is installed, SIGUSR1 would kill the process
parser = argparse.ArgumentParser()
parser.add_argument("--ckpt-dir", type=Path, required=True)
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--log", type=Path, required=True)
parser.add_argument("--resume-from", default="")
args = parser.parse_args()


def record(**fields):
    with open(args.log, "a") as f:
        f.write(json.dumps(fields) + "\n")


def save(why):
    atomic_write_text(args.ckpt_dir / f"checkpoint-{step}", f"step {step}\n")
    record(event="checkpoint", step=step, why=why)


step = int(Path(args.resume_from).read_text().split()[1]) if args.resume_from else 0
record(event="start", step=step, resume_from=args.resume_from, attempt=os.environ.get("SPOTVISOR_ATTEMPT"),
       resume_env=os.environ.get("SPOTVISOR_RESUME_FROM"))
while step < args.steps:
    time.sleep(0.05)
    step += 1
    stop, requested = signals.agree()
    if stop:
        notice = signals.notice()
        save("stop")
        record(event="stopped", step=step, notice_kind=notice and notice.kind,
               notice_provider=notice and notice.provider)
        sys.exit(0)
    if requested:
        save("requested")
        signals.clear_checkpoint()
    elif step % 5 == 0:
        save("periodic")
save("final")
record(event="done", step=step)
'''


class NoticeJob:
    """The job's files, written where the installation sees them as `job_dir` (`to_host`
    maps a path there to this machine's), and the steps of the scenario:

      1. the trainer runs and checkpoints; SIGUSR1 to spotvisor makes it checkpoint at once
         and go on;
      2. a trigger file appears (`provider.kind: file`): spotvisor logs the notice, writes
         the notice file, sends SIGTERM; the trainer saves and exits; spotvisor drains;
      3. the trigger file goes (the machine survived): spotvisor resumes the trainer from
         the checkpoint it saved in the window, with the attempt count carried over;
      4. the trainer finishes; spotvisor exits 0, its state records one preemption and no
         failure.
    """

    STEPS = 120

    def __init__(self, to_host: Callable[[str], Path], *, job_dir: str, config: str, state_dir: str,
                 python: str = "/usr/bin/python3") -> None:
        self.to_host = to_host
        self.job_dir = job_dir
        self.config = config
        self.state_dir = state_dir
        self.python = python
        self.trigger = f"{job_dir}/preempt-now"

    def write(self) -> None:
        j = json.dumps
        self.to_host(f"{self.job_dir}/ckpt").mkdir(parents=True, exist_ok=True)
        self.to_host(f"{self.job_dir}/trainer.py").write_text(TRAINER)
        config = self.to_host(self.config)
        config.parent.mkdir(parents=True, exist_ok=True)
        command = [self.python, f"{self.job_dir}/trainer.py", "--ckpt-dir", "{checkpoint_dir}", "--steps",
                   str(self.STEPS), "--log", f"{self.job_dir}/trainer.jsonl"]
        config.write_text("\n".join([
            "# tests/package: a short job stopped by a trigger-file notice",
            "job:",
            "  name: demo",
            f"  command: {j(command)}",
            f"  resume_args: {j(['--resume-from={checkpoint}'])}",
            f"  workdir: {j(self.job_dir)}",
            "provider:",
            "  kind: file",
            f"  file: {j(self.trigger)}",
            "  poll_interval: 100ms",
            "  resume_after: 500ms",
            "signals:",
            "  grace: 20s",
            "checkpoints:",
            f"  dir: {j(self.job_dir + '/ckpt')}",
            '  pattern: "checkpoint-{step}"',
            "  format: any",
            "restart:",
            "  max_restarts: 0",
            "telemetry:",
            f"  state_dir: {j(self.state_dir)}",
            "  gpu_interval: 0s",
            "",
        ]))

    # --- what happened ---------------------------------------------------------------
    def events(self) -> List[dict]:
        path = self.to_host(f"{self.job_dir}/trainer.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def wait_event(self, proc: subprocess.Popen, log: Path, timeout: float = 30, **fields: object) -> dict:
        """The first trainer event with these fields; fails with spotvisor's log when it does
        not come in time or spotvisor exits first."""
        end = time.monotonic() + timeout
        while True:
            for e in self.events():
                if all(e.get(k) == v for k, v in fields.items()):
                    return e
            if proc.poll() is not None or time.monotonic() > end:
                events = "\n".join(map(json.dumps, self.events()))
                raise AssertionError(f"no trainer event {fields} (spotvisor: {proc.poll()}); trainer events:\n"
                                     f"{events}\nspotvisor's log:\n{read_tail(log)}")
            time.sleep(0.05)

    def wait_log(self, proc: subprocess.Popen, log: Path, needle: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while needle not in read_tail(log, 1 << 20):
            if proc.poll() is not None or time.monotonic() > end:
                raise AssertionError(f"no '{needle}' in spotvisor's log (spotvisor: {proc.poll()}):\n{read_tail(log)}")
            time.sleep(0.05)

    # --- the scenario ----------------------------------------------------------------
    def drive(self, test: unittest.TestCase, proc: subprocess.Popen, log: Path,
              send_signal: Callable[[int], None], wait_timeout: float = 60) -> None:
        """Runs steps 1-4 against the spotvisor of `proc` (its output in `log`);
        `send_signal(signum)` delivers a signal to that spotvisor."""
        self.wait_event(proc, log, event="checkpoint", why="periodic")
        send_signal(signal.SIGUSR1)
        requested = self.wait_event(proc, log, event="checkpoint", why="requested")

        trigger = self.to_host(self.trigger)
        tmp = trigger.with_name(trigger.name + ".tmp")  # written elsewhere, then renamed
        tmp.write_text(json.dumps({"kind": "drill", "deadline": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                              time.gmtime(time.time() + 60))}))
        tmp.rename(trigger)
        stopped = self.wait_event(proc, log, event="stopped")
        self.wait_log(proc, log, "event=drained")
        trigger.unlink()

        try:
            code = proc.wait(wait_timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"spotvisor still runs {wait_timeout}s after the notice cleared:\n{read_tail(log)}")
        text = read_tail(log, 1 << 20)
        test.assertEqual(code, 0, text)
        for needle in ("event=notice", "event=stopping reason=notice", "event=drained", "event=resume_after_notice"):
            test.assertIn(needle, text)

        events = self.events()
        starts = [e for e in events if e["event"] == "start"]
        test.assertEqual(len(starts), 2, events)
        test.assertGreater(stopped["step"], requested["step"], events)
        test.assertEqual(stopped["notice_provider"], "file", events)  # the notice file spotvisor wrote
        test.assertEqual(stopped["notice_kind"], "drill", events)
        resumed_from = f"{self.job_dir}/ckpt/checkpoint-{stopped['step']}"
        test.assertEqual((starts[1]["resume_from"], starts[1]["resume_env"], starts[1]["step"], starts[1]["attempt"]),
                         (resumed_from, resumed_from, stopped["step"], "2"), events)
        test.assertEqual(events[-1], {"event": "done", "step": self.STEPS}, events)
        state = json.loads(self.to_host(f"{self.state_dir}/state.json").read_text())
        test.assertEqual((state.get("preemptions"), state.get("failures")), (1, 0), state)
        report = json.loads(self.to_host(f"{self.state_dir}/report.json").read_text())  # written at exit
        test.assertEqual([(n["provider"], n["kind"]) for n in report["notices"]], [("file", "drill")],
                         report["notices"])
        test.assertEqual([(a["outcome"], a["resumed_from"]) for a in report["attempts"]],
                         [("preempted", None), ("done", resumed_from)], report["attempts"])


def read_tail(path: Path, limit: int = 8000) -> str:
    try:
        return tail(path.read_text(errors="replace"), limit)
    except FileNotFoundError:
        return f"({path} does not exist)"
