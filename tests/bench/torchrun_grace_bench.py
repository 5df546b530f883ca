#!/usr/bin/python3
"""The time torchrun's workers really get to save after a stop (issue 11).

Two torchrun jobs (torch 1.13, --nproc_per_node=2) run side by side, each worker taking
forever to "save" once it gets SIGTERM: it notes the moment and then writes a timestamp
every 20 ms until something kills it. The time a worker got is its last timestamp minus the
SIGTERM's.
  bare      `torchrun ...` gets SIGTERM (what systemd or `kill` sends without spotvisor):
            torchrun forwards it and SIGKILLs its workers after its own fixed 30 s
  spotvisor `spotvisor run --grace G -- torchrun ...` gets SIGTERM: the workers get it,
            torchrun waits paused, SIGKILL comes at the end of the grace

Prints a Markdown table for docs/BENCHMARKS.md. Run from the repository root after a build:

    /usr/bin/python3 tests/bench/torchrun_grace_bench.py [--build build] [--grace 90]
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
open(out + ".ready", "w").close()
while not stop:
    time.sleep(0.01)
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
while True:                                    # the save that never ends
    os.pwrite(fd, f"{stop[0]:.6f} {time.monotonic():.6f}\n".ljust(40).encode(), 0)
    time.sleep(0.02)
'''

TORCHRUN = ["torchrun", "--standalone", "--nproc_per_node=2", "--redirects", "1", "--tee", "1",
            "--monitor_interval", "0.5"]


def start(kind, tmp, spotvisor, grace):
    worker = tmp / "worker.py"
    out = tmp / kind
    argv = [*TORCHRUN, str(worker), str(out)]
    if kind == "spotvisor":
        argv = [spotvisor, "run", "--name", "grace-bench", "--state-dir", str(tmp / "state"), "--grace",
                f"{grace}s", "--provider", "none", "--", *argv]
    log = open(tmp / f"{kind}.log", "wb")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    return proc, out


def wait_ready(out, timeout=120):
    end = time.monotonic() + timeout
    while not all(Path(f"{out}.{r}.ready").exists() for r in (0, 1)):
        if time.monotonic() > end:
            raise SystemExit(f"workers of {out} did not start")
        time.sleep(0.05)


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
    args = p.parse_args()
    spotvisor = str(Path(args.build, "spotvisor").resolve())
    with tempfile.TemporaryDirectory(prefix="spotvisor-grace-bench-") as t:
        tmp = Path(t)
        (tmp / "worker.py").write_text(WORKER)
        runs = {kind: start(kind, tmp, spotvisor, args.grace) for kind in ("bare", "spotvisor")}
        for _, out in runs.values():
            wait_ready(out)
        for proc, _ in runs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {}
        for kind, (proc, _) in runs.items():
            codes[kind] = proc.wait(args.grace + 120)
        got = {kind: granted(out) for kind, (_, out) in runs.items()}

    print(f"{args.grace} s grace; torch 1.13 `torchrun --nproc_per_node=2`; each worker saves forever after "
          "SIGTERM. Time from the worker's SIGTERM to its last write before SIGKILL, both ranks:\n")
    print("| the stop reaches torchrun as | worker time (rank 0, rank 1) | exit code |")
    print("|---|---|---|")
    print(f"| SIGTERM to bare `torchrun` | {got['bare'][0]:.1f} s, {got['bare'][1]:.1f} s | {codes['bare']} |")
    print(f"| SIGTERM to `spotvisor run --grace {args.grace}s -- torchrun` | {got['spotvisor'][0]:.1f} s, "
          f"{got['spotvisor'][1]:.1f} s | {codes['spotvisor']} |")
    ratio = min(got["spotvisor"]) / max(min(got["bare"]), 1e-9)
    print(f"\nspotvisor gives the workers {ratio:.1f}x the time bare torchrun does "
          f"(goal: at least {args.grace - 1} s of a {args.grace} s grace).")


if __name__ == "__main__":
    sys.exit(main())
