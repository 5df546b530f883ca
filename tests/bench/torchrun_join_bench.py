#!/usr/bin/python3
"""A notice while torchrun's workers still join the group (issue 22): how long the stop takes.

Two `spotvisor run -- torchrun --standalone --nproc_per_node 2` jobs side by side, each with its
own mock AWS metadata server and a 90 s grace. Each worker installs its SIGTERM handler, then
"imports" for --before-init seconds (a sleep), then joins the group (gloo) and trains; at the
first step after a SIGTERM the ranks agree to stop, rank 0 saves and both exit 0. The notice
comes while both workers are still in their imports. Measured: from the notice to spotvisor's
`attempt_ended`, and how it ended.

  before  --old-binary: a spotvisor without the stall release (e.g. commit dbb2331's build)
  after   --binary: this build

With torch 2.x the workers join through the rendezvous store inside the launcher, which the
stop pauses; torch 1.13's workers keep their store in rank 0 (no difference expected there).
Prints a Markdown table for docs/BENCHMARKS.md. Run from the repository root:

    /usr/bin/python3 tests/bench/torchrun_join_bench.py --python PY --binary build/spotvisor \
        --old-binary OLD/spotvisor
"""
import argparse
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

WORKER = r'''
import os, signal, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
open(os.path.join(sys.argv[1], f"starting-{os.getpid()}"), "w").close()
time.sleep(float(sys.argv[2]))
import torch, torch.distributed as dist
dist.init_process_group("gloo")
for step in range(1, 1_000_000):
    time.sleep(0.05)
    flag = torch.tensor([1.0 if stop else 0.0]); dist.all_reduce(flag)
    if flag.item() > 0:
        if dist.get_rank() == 0:
            os.makedirs(os.path.join(sys.argv[1], f"step-{step}"))
            torch.save({"step": step}, os.path.join(sys.argv[1], f"step-{step}", "model.pt"))
        dist.barrier()
        sys.exit(0)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name: str, binary: str, python: str, before_init: float, root: Path):
    work = root / name
    (work / "ckpt").mkdir(parents=True)
    (work / "worker.py").write_text(WORKER)
    port = free_port()
    mock = subprocess.Popen([binary, "mock-metadata", "--provider", "aws", "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    command = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(work / "worker.py"), str(work / "ckpt"), str(before_init)]
    (work / "job.yaml").write_text("\n".join([
        "job:", f"  name: join-{name}", f"  command: {json.dumps(command)}", "  workdir: .",
        '  env: {OMP_NUM_THREADS: "1"}',
        f'provider: {{kind: aws, endpoint: "http://127.0.0.1:{port}", poll_interval: 200ms, resume_after: 1h}}',
        "signals: {on_notice: SIGTERM, grace: 90s}",
        'checkpoints: {dir: ./ckpt, pattern: "step-{step}"}',
        "telemetry: {state_dir: ./state, log_format: text}", ""]))
    log = open(work / "run.log", "w")
    sv = subprocess.Popen([binary, "run", "--config", str(work / "job.yaml")], stdout=log, stderr=subprocess.STDOUT,
                          cwd=work)
    return {"name": name, "work": work, "port": port, "mock": mock, "sv": sv}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True, help="the Python whose torch runs the workers")
    p.add_argument("--binary", default="build/spotvisor")
    p.add_argument("--old-binary", required=True, help="a spotvisor before the stall release")
    p.add_argument("--before-init", type=float, default=8.0)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spotvisor-join-bench-"))
    jobs = [start("before", os.path.abspath(args.old_binary), args.python, args.before_init, root),
            start("after", os.path.abspath(args.binary), args.python, args.before_init, root)]
    try:
        for job in jobs:  # both workers in their imports
            end = time.monotonic() + 120
            while len(list((job["work"] / "ckpt").glob("starting-*"))) < 2 and time.monotonic() < end:
                time.sleep(0.1)
        noticed = {}
        for job in jobs:
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{job['port']}/__spotvisor/preempt",
                                                          data=b"{}", method="POST"), timeout=5).read()
            noticed[job["name"]] = time.monotonic()
        ended = {}
        end = time.monotonic() + 150
        while len(ended) < len(jobs) and time.monotonic() < end:
            for job in jobs:
                text = (job["work"] / "run.log").read_text()
                m = re.search(r"event=attempt_ended .*status=\"([^\"]+)\"", text)
                if m and job["name"] not in ended:
                    ended[job["name"]] = (time.monotonic() - noticed[job["name"]], m.group(1),
                                          "event=grace_expired" in text, "event=launcher_released" in text)
            time.sleep(0.1)
        torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True).stdout.strip()
        print(f"torch {torch_version}, grace 90 s, notice {args.before_init:g} s of imports before the workers join\n")
        print("| spotvisor | notice to attempt_ended | trainer's end | grace expired | launcher released early |")
        print("|---|---|---|---|---|")
        for job in jobs:
            took, status, expired, released = ended.get(job["name"], (float("nan"), "still running", False, False))
            print(f"| {job['name']} | {took:.1f} s | {status} | {'yes' if expired else 'no'} | "
                  f"{'yes' if released else 'no'} |")
        if "before" in ended and "after" in ended:
            print(f"\nThe stop takes {ended['before'][0] / ended['after'][0]:.1f}x less time with the stall release.")
    finally:
        for job in jobs:
            for proc in (job["sv"], job["mock"]):
                proc.terminate()
            for proc in (job["sv"], job["mock"]):
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
