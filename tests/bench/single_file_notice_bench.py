#!/usr/bin/python3
"""Iterations lost per notice for a script as it is (issue "scripts as they are").

The trainer is examples/single_file/train.py: one `torch.save` over out/ckpt.pt every
--save-every iterations, no signal handler, `--init_from=resume`. Three ways to run it
through --notices preemptions, each at a random moment (seeded):

- spotvisor, `signals.defer_stop: auto` (the default): the notice comes through the mock
  AWS metadata server (a two-minute warning); the stop waits for the next save;
- spotvisor, `signals.defer_stop: never`: the stop (SIGTERM) at the notice;
- bare, no supervisor: SIGTERM at the same kind of moment, then the user's own restart with
  `--init_from=resume` (what a user does instead). A SIGKILL while ckpt.pt is being
  rewritten ends that run for good: torch.load refuses the torn file, every iteration lost.

Lost per notice = the iterations the trainer had run when it was stopped less the
iteration it resumed from (both from its own lines). Markdown on stdout. Run from the
repository root after a build:

    /usr/bin/python3 tests/bench/single_file_notice_bench.py [--binary build/spotvisor] \
        [--notices 10] [--save-every 20] [--iter-sleep 0.1] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.e2e.processes import MockMetadata, Supervisor, clean_env  # noqa: E402

TRAINER = REPO / "examples" / "single_file" / "train.py"
PYTHON = "/usr/bin/python3"
MODEL = ["--n_layer=2", "--n_embd=128", "--vocab_size=2048", "--block_size=16", "--batch_size=4"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "spotvisor"))
    p.add_argument("--notices", type=int, default=10)
    p.add_argument("--save-every", type=int, default=20)
    p.add_argument("--iter-sleep", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def trainer_argv(args, out: str, iters: int) -> list:
    return [PYTHON, str(TRAINER), f"--out_dir={out}", f"--max_iters={iters}", f"--eval_interval={args.save_every}",
            f"--iter_sleep={args.iter_sleep}", *MODEL]


def iterations(text: str) -> list:
    return [int(m) for m in re.findall(r"^iter (\d+):", text, re.M)]


def wait_until(probe, timeout: float, log: Path = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log else ""
    raise SystemExit(f"timed out waiting for {probe}\n{tail}")


def supervised(args, work: Path, defer: str, rng: random.Random) -> list:
    """Lost iterations per notice under spotvisor with signals.defer_stop: `defer`."""
    mock = MockMetadata(args.binary, "aws", work)
    command = trainer_argv(args, "{checkpoint_dir}", 100000)
    (work / "job.yaml").write_text("\n".join([
        "job:", "  name: bench-single-file", f"  command: {json.dumps(command)}",
        '  resume_args: ["--init_from=resume"]', "  workdir: .", '  env: {OMP_NUM_THREADS: "1"}',
        "provider:", "  kind: aws", f'  endpoint: "{mock.url}"', "  poll_interval: 200ms", "  resume_after: 200ms",
        "signals:", f"  defer_stop: {defer}",
        "checkpoints:", "  dir: ./out", '  pattern: "ckpt.pt"', "  keep: 2",
        "restart:", "  backoff: {initial: 100ms, max: 1s, multiplier: 2, jitter: 0}",
        "telemetry:", "  state_dir: ./state", "  log_format: text", ""]))
    sv = Supervisor(args.binary, work / "job.yaml", work / "run.log")
    lost = []
    try:
        for attempt in range(1, args.notices + 1):
            sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt))
            start = sv.text().rfind(f"event=trainer_started attempt={attempt} ")
            wait_until(lambda: len(iterations(sv.text()[start:])) >= 3, 180, work / "run.log")
            time.sleep(rng.uniform(0, args.save_every * args.iter_sleep * 1.5))
            mock.preempt()
            sv.wait_event("attempt_ended", 300, lambda e: e.get("attempt") == str(attempt))
            ran = iterations(sv.text()[start:])
            mock.clear()
            nxt = sv.wait_event("trainer_started", 180, lambda e: e.get("attempt") == str(attempt + 1))
            resumed = 0  # no checkpoint yet: a fresh start
            if nxt.get("resume", "none") != "none":
                at = sv.text().rfind(f"event=trainer_started attempt={attempt + 1} ")
                resumed = int(wait_until(lambda: re.findall(r"^resuming from iteration (\d+)", sv.text()[at:], re.M),
                                         180, work / "run.log")[0])
            lost.append(ran[-1] + 1 - resumed)
    finally:
        sv.kill()
        mock.stop()
    return lost


def bare(args, work: Path, rng: random.Random) -> list:
    """Lost iterations per SIGTERM without a supervisor, the user restarting by hand with
    --init_from=resume: the iterations run less the one the next run resumed from. A SIGTERM
    that tore ckpt.pt ends the list with "torn"."""
    lost = []
    ran = None
    for run in range(args.notices + 1):
        log = work / f"bare-{run}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(trainer_argv(args, "out", 100000) + (["--init_from=resume"] if (work / "out" / "ckpt.pt").exists() else []),
                                    cwd=work, stdout=out, stderr=subprocess.STDOUT,
                                    env=clean_env({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}))
        try:
            wait_until(lambda: len(iterations(log.read_text())) >= 3 or proc.poll() is not None, 180)
        finally:
            if proc.poll() is not None and run:
                lost.append("torn")
                return lost
        if run:
            resumed = int((re.findall(r"^resuming from iteration (\d+)", log.read_text(), re.M) or ["0"])[0])
            lost.append(ran + 1 - resumed)
        if run == args.notices:
            proc.kill()
            proc.wait(60)
            break
        time.sleep(rng.uniform(0, args.save_every * args.iter_sleep * 1.5))
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        ran = iterations(log.read_text())[-1]
    return lost


def torn(args, work: Path) -> str:
    """A SIGKILL while ckpt.pt is rewritten, then the user's restart: what torch.load says."""
    out = work / "out"
    with open(work / "torn.log", "w") as log:
        proc = subprocess.Popen(trainer_argv(args, "out", 100000), cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                env=clean_env({"OMP_NUM_THREADS": "1"}))
    full = wait_until(lambda: (out / "ckpt.pt").exists() and (out / "ckpt.pt").stat().st_size, 300)
    wait_until(lambda: (out / "ckpt.pt").stat().st_size < full * 0.9, 300)
    proc.kill()
    proc.wait(60)
    again = subprocess.run(trainer_argv(args, "out", 100000) + ["--init_from=resume"], cwd=work, capture_output=True,
                           text=True, env=clean_env({"OMP_NUM_THREADS": "1"}), timeout=300)
    last = (again.stderr.strip().splitlines() or ["(nothing)"])[-1]
    return f"exit {again.returncode}: {last[:120]}"


def row(name: str, lost: list) -> str:
    torn_note = " (then a torn ckpt.pt: the run could not resume)" if "torn" in lost else ""
    lost = [n for n in lost if n != "torn"]
    return (f"| {name} | {len(lost)} | {statistics.mean(lost):.1f} | {statistics.median(lost):.0f} | {max(lost)} | "
            f"{' '.join(map(str, lost))}{torn_note} |")


def main():
    args = parse_args()
    rows = []
    for name, run in (("spotvisor, `signals.defer_stop: auto` (the default)", lambda w, r: supervised(args, w, "auto", r)),
                      ("spotvisor, `signals.defer_stop: never`", lambda w, r: supervised(args, w, "never", r)),
                      ("bare: SIGTERM, restarted by hand with `--init_from=resume`", lambda w, r: bare(args, w, r))):
        with tempfile.TemporaryDirectory(prefix="spotvisor-single-file-bench-") as work:
            rows.append(row(name, run(Path(work), random.Random(args.seed))))
    with tempfile.TemporaryDirectory(prefix="spotvisor-single-file-bench-") as work:
        torn_outcome = torn(args, Path(work))
    print(f"Iterations lost per notice, a save every {args.save_every} iterations "
          f"(~{args.iter_sleep:.2f} s of sleep each), {args.notices} notices at random moments (seed {args.seed}):\n")
    print("| run | notices | mean | median | max | each |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nBare, a SIGKILL while ckpt.pt is rewritten, then `--init_from=resume`: {torn_outcome} "
          f"(every iteration lost; under spotvisor the newest kept version is put back).")


if __name__ == "__main__":
    main()
