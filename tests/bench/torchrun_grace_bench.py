#!/usr/bin/python3
"""The time torchrun's workers really get to save after a stop (issue 11).

torchrun jobs (--nproc_per_node=2) run side by side, each worker taking forever to "save"
once it gets SIGTERM: it notes the moment and then writes a timestamp every 20 ms until
something kills it. The time a worker got is its last timestamp minus the SIGTERM's; a
worker still alive once its launcher's supervisor exited is counted, then killed (for such
a worker the time is only how long until the bench looked).
  bare      `torchrun ...` gets SIGTERM (what systemd or `kill` sends without spotvisor):
            torchrun forwards it and SIGKILLs its workers after its own timeout (30 s)
  bare-timeout  (torch with --shutdown-timeout only) `torchrun --shutdown-timeout G ...`
  spotvisor `spotvisor run --grace G -- torchrun ...` gets SIGTERM: the workers get it,
            torchrun waits paused, SIGKILL comes at the end of the grace
  group     `spotvisor run --grace G --signal-target group -- torchrun ...`: the agent gets
            the SIGTERM itself, as before `signals.target: auto`
  group-env (torch with --shutdown-timeout only) the same with
            TORCH_ELASTIC_SHUTDOWN_TIMEOUT=G in spotvisor's (so torchrun's) environment

--python picks the torch: torchrun is the console script beside it (Debian's python3 has
/usr/bin/torchrun; torch 1.13 under Python 3.11 needs --redirects 1 --tee 1, 2.x runs as typed).
Prints a Markdown table for docs/BENCHMARKS.md. Run from the repository root after a build:

    /usr/bin/python3 tests/bench/torchrun_grace_bench.py [--build build] [--grace 90] [--python PY]
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r'''
import os, signal, sys, time
out = sys.argv[1] + "." + os.environ.get("RANK", "0")
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(time.monotonic()))
open(out + ".ready", "w").write(str(os.getpid()))
while not stop:
    time.sleep(0.01)
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
while True:                                    # the save that never ends
    os.pwrite(fd, f"{stop[0]:.6f} {time.monotonic():.6f}\n".ljust(40).encode(), 0)
    time.sleep(0.02)
'''

DEBIAN_PYTHON = "/usr/bin/python3"


def torch_version(python):
    return subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def torchrun(python, version):
    program = "torchrun" if python == DEBIAN_PYTHON else str(Path(python).parent / "torchrun")
    legacy = version.split(".")[0] in ("0", "1")
    return [program, "--standalone", "--nproc_per_node=2", *(["--redirects", "1", "--tee", "1"] if legacy else []),
            "--monitor_interval", "0.5"]


def start(kind, tmp, spotvisor, grace, launcher):
    worker = tmp / "worker.py"
    out = tmp / kind
    argv = [*launcher, str(worker), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if kind == "bare-timeout":
        argv = [*launcher, "--shutdown-timeout", str(grace), str(worker), str(out)]
    if kind in ("spotvisor", "group", "group-env"):
        argv = [spotvisor, "run", "--name", f"grace-bench-{kind}", "--state-dir", str(tmp / f"state-{kind}"),
                "--grace", f"{grace}s", "--provider", "none",
                *(["--signal-target", "group"] if kind != "spotvisor" else []), "--", *argv]
    if kind == "group-env":
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(grace)
    log = open(tmp / f"{kind}.log", "wb")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env)
    return proc, out


def wait_ready(out, timeout=120):
    end = time.monotonic() + timeout
    while not all(Path(f"{out}.{r}.ready").exists() for r in (0, 1)):
        if time.monotonic() > end:
            raise SystemExit(f"workers of {out} did not start")
        time.sleep(0.05)


def survivors(out):
    """Workers of `out` still alive now that their launcher (and spotvisor) exited: torch
    2.x starts each in a session of its own, out of reach of a signal to the group. They
    get SIGKILL here, so the bench leaves nothing behind."""
    alive = []
    for rank in (0, 1):
        pid = int(Path(f"{out}.{rank}.ready").read_text())
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
                    os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return alive


def granted(out):
    """Seconds from SIGTERM to the last sign of life, per rank."""
    got = []
    for rank in (0, 1):
        first, last = map(float, Path(f"{out}.{rank}").read_text().split())
        got.append(last - first)
    return got


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--grace", type=int, default=90)
    p.add_argument("--python", default=DEBIAN_PYTHON, help="the python whose torch (and torchrun) to run")
    args = p.parse_args()
    spotvisor = str(Path(args.build, "spotvisor").resolve())
    version = torch_version(args.python)
    launcher = torchrun(args.python, version)
    has_timeout = subprocess.run([*launcher[:1], "--help"], capture_output=True, text=True).stdout.find(
        "--shutdown-timeout") >= 0
    kinds = ["bare", "spotvisor"] + (["bare-timeout", "group", "group-env"] if has_timeout else [])
    with tempfile.TemporaryDirectory(prefix="spotvisor-grace-bench-") as t:
        tmp = Path(t)
        (tmp / "worker.py").write_text(WORKER)
        runs = {kind: start(kind, tmp, spotvisor, args.grace, launcher) for kind in kinds}
        for _, out in runs.values():
            wait_ready(out)
        for proc, _ in runs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {}
        for kind, (proc, _) in runs.items():
            codes[kind] = proc.wait(args.grace + 120)
        time.sleep(1)   # a worker SIGKILLed with its launcher is gone by now
        left = {kind: survivors(out) for kind, (_, out) in runs.items()}
        got = {kind: granted(out) for kind, (_, out) in runs.items()}

    print(f"{args.grace} s grace; torch {version} `{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(launcher))}`; "
          "each worker saves forever after SIGTERM. Time from the worker's SIGTERM to its last write before SIGKILL, "
          "both ranks:\n")
    rows = {
        "bare": "SIGTERM to bare `torchrun`",
        "bare-timeout": f"SIGTERM to bare `torchrun --shutdown-timeout {args.grace}`",
        "spotvisor": f"SIGTERM to `spotvisor run --grace {args.grace}s -- torchrun`",
        "group": f"SIGTERM to `spotvisor run --grace {args.grace}s --signal-target group -- torchrun`",
        "group-env": f"the same with `TORCH_ELASTIC_SHUTDOWN_TIMEOUT={args.grace}`",
    }
    print("| the stop reaches torchrun as | worker time (rank 0, rank 1) | exit code | workers alive after the exit |")
    print("|---|---|---|---|")
    for kind in kinds:
        alive = f"{len(left[kind])} (SIGKILLed by the bench)" if left[kind] else "0"
        print(f"| {rows[kind]} | {got[kind][0]:.1f} s, {got[kind][1]:.1f} s | {codes[kind]} | {alive} |")
    ratio = min(got["spotvisor"]) / max(min(got["bare"]), 1e-9)
    print(f"\nspotvisor gives the workers {ratio:.1f}x the time bare torchrun does "
          f"(goal: at least {args.grace - 1} s of a {args.grace} s grace).")


if __name__ == "__main__":
    sys.exit(main())
