#!/usr/bin/python3
"""The spotvisor contract in pure Python: no torch, no NumPy, starts in milliseconds.

A linear regression on synthetic data generated from --seed, trained by minibatch SGD with
momentum and input dropout drawn from Python's global `random`, with the data order from
spotvisor_helper.ResumableSampler. Random draws, data order and optimizer state all shape
the result, so only an exact resume reproduces an uninterrupted run's final weights, whose
SHA-256 goes to --result-file. The fallback where torch is missing, and the fast child for
spotvisor's own integration tests.

Signals: SIGUSR1 = save at the next step boundary and keep going; SIGTERM = save at the
next step boundary and exit 0. Output lines (stable, for tests and drills):
  [trainer] start step=0 world=1            [trainer] resumed from=PATH step=S rng=yes|no
  step=S loss=L                             [trainer] saved step=S reason=R path=PATH
  [trainer] stopping step=S                 [trainer] done step=S digest=HEX
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

try:
    import spotvisor_helper as helper
except ImportError:   # running from the repository: the helper lives in <repo>/python
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import spotvisor_helper as helper

DIM, SAMPLES, KEEP_PROB = 8, 256, 0.9


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", required=True, help="checkpoint directory ({checkpoint_dir})")
    p.add_argument("--steps", type=int, default=60, help="total SGD steps (default 60)")
    p.add_argument("--resume_from", "--resume-from", dest="resume_from", default=None,
                   help="checkpoint to resume from (default: $SPOTVISOR_RESUME_FROM)")
    p.add_argument("--result-file", default=None,
                   help="write the SHA-256 of the final weights here ({result_file})")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step, so tests can interrupt mid-run")
    p.add_argument("--checkpoint-every", type=int, default=20,
                   help="periodic fallback checkpoint every N steps; 0 = off (default 20)")
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep (default 3)")
    p.add_argument("--pattern", default="ckpt_step{step}", help="checkpoint name pattern")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--heartbeat-file", default=None, help="touched every step (hang detection)")
    p.add_argument("--stop-signal", default="SIGTERM",
                   help="signal meaning save and exit (spotvisor signals.on_notice)")
    p.add_argument("--checkpoint-signal", default="SIGUSR1",
                   help="signal meaning save and continue (spotvisor signals.checkpoint)")
    p.add_argument("--break-rng-restore", action="store_true",
                   help="BROKEN ON PURPOSE: on resume, do not restore RNG and data-loader "
                        "state (a drill must notice that the result differs)")
    return p.parse_args(argv)


def make_dataset(seed: int) -> List[Tuple[List[float], float]]:
    """Synthetic regression data, a pure function of the seed."""
    rng = random.Random(seed)
    w_true = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
    data = []
    for _ in range(SAMPLES):
        x = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
        y = sum(wi * xi for wi, xi in zip(w_true, x)) + 0.5 + 0.1 * rng.gauss(0.0, 1.0)
        data.append((x, y))
    return data


class LinearModel:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed + 7)
        self.w = [rng.uniform(-0.1, 0.1) for _ in range(DIM)]
        self.b = 0.0

    def state_dict(self) -> Dict[str, Any]:
        return {"w": list(self.w), "b": self.b}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.w, self.b = [float(v) for v in state["w"]], float(state["b"])


class MomentumSGD:
    def __init__(self, model: LinearModel, lr: float = 0.05, momentum: float = 0.9) -> None:
        self.model, self.lr, self.momentum = model, lr, momentum
        self.vw = [0.0] * DIM
        self.vb = 0.0

    def lr_at(self, step: int) -> float:
        return self.lr * (0.5 ** (step // 20))

    def step(self, gw: List[float], gb: float, step: int) -> None:
        lr = self.lr_at(step)
        self.vw = [self.momentum * v + g for v, g in zip(self.vw, gw)]
        self.vb = self.momentum * self.vb + gb
        self.model.w = [w - lr * v for w, v in zip(self.model.w, self.vw)]
        self.model.b -= lr * self.vb

    def state_dict(self) -> Dict[str, Any]:
        return {"vw": list(self.vw), "vb": self.vb}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.vw, self.vb = [float(v) for v in state["vw"]], float(state["vb"])


def train_step(model: LinearModel, opt: MomentumSGD, batch, step: int) -> float:
    """One SGD step on squared error, with inverted input dropout from global `random`."""
    gw, gb, loss = [0.0] * DIM, 0.0, 0.0
    for x, y in batch:
        xd = [xi / KEEP_PROB if random.random() < KEEP_PROB else 0.0 for xi in x]
        err = sum(w * xi for w, xi in zip(model.w, xd)) + model.b - y
        loss += err * err
        gw = [g + 2.0 * err * xi for g, xi in zip(gw, xd)]
        gb += 2.0 * err
    n = float(len(batch))
    opt.step([g / n for g in gw], gb / n, step)
    return loss / n


def describe_notice(signals) -> str:
    """What spotvisor's notice file says, for the log ("" when there is none)."""
    try:
        notice = signals.notice()
    except helper.NoticeError as e:
        return f" notice=unreadable ({e})"
    if notice is None:
        return ""
    left = notice.seconds_left()
    return (f" notice={notice.kind} provider={notice.provider} action={notice.action} "
            f"seconds_left={'unknown' if left is None else f'{left:.0f}'}")


def main(argv=None) -> int:
    args = parse_args(argv)
    signals = helper.SignalFlags(notice=args.stop_signal, checkpoint=args.checkpoint_signal)
    random.seed(args.seed + 1)

    data = make_dataset(args.seed)
    model = LinearModel(args.seed)
    opt = MomentumSGD(model)
    sampler = helper.ResumableSampler(len(data), args.seed, args.batch_size)
    ckpt = helper.Checkpointer(args.ckpt_dir, pattern=args.pattern, keep=args.keep)
    ckpt.track(model=model, optimizer=opt, sampler=sampler)
    try:
        if args.break_rng_restore:
            loaded = ckpt.resume(args.resume_from, restore_rng=False, exclude=("sampler",))
        else:
            loaded = ckpt.resume(args.resume_from)
    except helper.CheckpointError as e:
        print(f"[trainer] error: {e}", file=sys.stderr, flush=True)
        return 1
    step = loaded.step if loaded else 0
    if loaded:
        print(f"[trainer] resumed from={loaded.path} step={step} "
              f"rng={'yes' if loaded.rng_restored else 'no'}", flush=True)
    else:
        print("[trainer] start step=0 world=1", flush=True)

    heartbeat = helper.Heartbeat(args.heartbeat_file, min_interval=0.5)
    try:
        train(args, step, signals, ckpt, model, opt, sampler, data, heartbeat)
    except helper.CheckpointError as e:
        print(f"[trainer] error: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


def train(args, step, signals, ckpt, model, opt, sampler, data, heartbeat) -> None:
    """Train from `step` to --steps, or until a stop signal (after saving)."""
    stopped = False
    while step < args.steps and not stopped:
        for indices in sampler:
            loss = train_step(model, opt, [data[i] for i in indices], step)
            step += 1
            print(f"step={step} loss={loss:.6f}", flush=True)
            heartbeat.beat()
            if args.step_sleep > 0:
                time.sleep(args.step_sleep)
            # Read the flags once: a stop that arrives during the save below is handled
            # at the next boundary, never skipped.
            stop, requested = signals.agree()
            periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
            if stop or requested or periodic:
                reason = "stop" if stop else "signal" if requested else "periodic"
                path = ckpt.save(step, extra={"epoch": sampler.epoch})
                signals.clear_checkpoint()
                print(f"[trainer] saved step={step} reason={reason} path={path}", flush=True)
            if stop:
                print(f"[trainer] stopping step={step}{describe_notice(signals)}", flush=True)
                stopped = True
                break
            if step >= args.steps:
                break

    if not stopped:
        if ckpt.last_saved_step != step:
            path = ckpt.save(step, extra={"epoch": sampler.epoch})
            print(f"[trainer] saved step={step} reason=final path={path}", flush=True)
        digest = helper.state_digest({"w": model.w, "b": model.b})
        if args.result_file:
            helper.atomic_write_text(args.result_file, digest + "\n")
        print(f"[trainer] done step={step} digest={digest}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
