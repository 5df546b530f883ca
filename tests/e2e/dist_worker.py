#!/usr/bin/python3
"""A torchrun worker for the launcher tests (tests/e2e/test_torchrun.py): gloo, CPU.

Each rank writes `<pid-dir>/rank<R>-restart<N>.pid` when it starts (N is torchrun's
TORCHELASTIC_RESTART_COUNT), so tests see every worker torchrun ever started. At every step
the ranks agree on spotvisor's signals (spotvisor_helper.SignalFlags.agree): SIGUSR1 saves
and goes on, SIGTERM saves and exits with --stop-exit. Knobs for the cases under test:
  --save-seconds S    a stop's save takes S seconds longer (a big model on a slow disk)
  --ignore-term       SIGTERM ignored: only SIGKILL ends the worker
  --crash-once-at K   rank 1 exits 3 at step K, once (a marker file remembers it)
Output (every rank): [worker] start|saved|stopping|done ... rank=R
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import spotvisor_helper as helper  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--pid-dir", required=True)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--step-sleep", type=float, default=0.1)
    p.add_argument("--save-seconds", type=float, default=0.0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--crash-once-at", type=int, default=0)
    p.add_argument("--stop-exit", type=int, default=0)
    p.add_argument("--before-init", type=float, default=0.0,
                   help="after the imports, write <pid-dir>/starting-<pid> and sleep this long before joining the group")
    args = p.parse_args()

    signals = helper.SignalFlags(notice="SIGTERM", checkpoint="SIGUSR1")   # before the slow imports
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    import torch
    import torch.distributed as dist

    if args.before_init > 0:                    # a slow start: the group is joined later
        Path(args.pid_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.pid_dir) / f"starting-{os.getpid()}").touch()
        time.sleep(args.before_init)
    with signals.shielded():                    # gloo's threads never take our signals
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    pid_dir = Path(args.pid_dir)
    pid_dir.mkdir(parents=True, exist_ok=True)
    helper.atomic_write_text(pid_dir / f"rank{rank}-restart{restart}.pid", f"{os.getpid()}\n")

    def log(text: str) -> None:
        # One write per line: torch 2.x's torchrun, typed without --tee, leaves both ranks on
        # its stdout, and print()'s two writes (text, newline) interleave between them.
        sys.stdout.write(f"[worker] {text} rank={rank}\n")
        sys.stdout.flush()

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    ckpt = helper.Checkpointer(args.ckpt_dir, keep=0).track(model=model)
    loaded = ckpt.resume()
    step = loaded.step if loaded else 0
    log(f"start step={step} restart={restart} pid={os.getpid()}")
    marker = Path(args.ckpt_dir).parent / "crashed-once"
    while step < args.steps:
        step += 1
        with torch.no_grad():
            model.weight.add_(0.01)
        time.sleep(args.step_sleep)
        if args.crash_once_at == step and rank == 1 and not marker.exists():
            marker.touch()
            log(f"crashing step={step}")
            os._exit(3)
        stop, requested = signals.agree()
        if stop or requested:
            if stop and args.save_seconds > 0:
                log(f"slow save begins step={step} seconds={args.save_seconds:g}")
                time.sleep(args.save_seconds)
            path = ckpt.save(step)
            signals.clear_checkpoint()
            log(f"saved step={step} reason={'stop' if stop else 'signal'} path={path}")
        if stop:
            log(f"stopping step={step} exit={args.stop_exit}")
            os._exit(args.stop_exit)   # torch 1.13 + gloo may deadlock in teardown (see train.py)
    dist.barrier()
    log(f"done step={step}")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
