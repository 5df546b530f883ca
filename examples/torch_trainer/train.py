#!/usr/bin/python3
"""A small, deterministic PyTorch trainer that resumes exactly after any interruption.

Tiny MLP with dropout, synthetic data generated from --seed, CPU only, deterministic
algorithms, a shuffled DataLoader driven by spotvisor_helper.ResumableSampler. Every source
of randomness matters to the result (torch: dropout; NumPy: input noise; Python `random`:
loss scaling; the sampler: data order), so a resume that misses any of them ends with
different weights. An uninterrupted run and any interrupted-and-resumed run write the same
SHA-256 of the final weights to --result-file.

Signals (spotvisor's contract): SIGUSR1 = save at the next step boundary and keep going;
SIGTERM = save at the next step boundary and exit 0. Under torchrun (WORLD_SIZE > 1) it
runs DDP over gloo; all ranks agree on every flag at every step and stop together; rank 0
writes checkpoints and the result file.

Output lines meant for tests and drills (rank 0 only):
  [trainer] start step=S world=W            [trainer] resumed from=PATH step=S rng=yes|no
  step=S loss=L                             [trainer] saved step=S reason=R path=PATH
  [trainer] stopping step=S                 [trainer] done step=S digest=HEX
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

try:
    import spotvisor_helper as helper
except ImportError:   # running from the repository: the helper lives in <repo>/python
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import spotvisor_helper as helper

# torch and NumPy are imported in main(), after the signal handlers are installed: a
# SIGUSR1 that arrives during the (slow) import would otherwise kill the process.

DIM, HIDDEN, CLASSES, SAMPLES = 16, 64, 4, 512


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", required=True, help="checkpoint directory ({checkpoint_dir})")
    p.add_argument("--steps", type=int, default=60, help="total optimizer steps (default 60)")
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
    p.add_argument("--batch-size", type=int, default=16, help="per-rank batch size")
    p.add_argument("--heartbeat-file", default=None, help="touched every step (hang detection)")
    p.add_argument("--stop-signal", default="SIGTERM",
                   help="signal meaning save and exit (spotvisor signals.on_notice)")
    p.add_argument("--checkpoint-signal", default="SIGUSR1",
                   help="signal meaning save and continue (spotvisor signals.checkpoint)")
    p.add_argument("--break-rng-restore", action="store_true",
                   help="BROKEN ON PURPOSE: on resume, do not restore the RNG states "
                        "(a drill must notice that the result differs)")
    p.add_argument("--break-data-restore", action="store_true",
                   help="BROKEN ON PURPOSE: on resume, do not restore the data-loader "
                        "position, so the epoch starts over (a drill must notice)")
    return p.parse_args(argv)


def make_model(nn):
    """A tiny MLP; dropout makes the torch RNG part of the result."""
    return nn.Sequential(
        nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(HIDDEN, CLASSES))


def make_dataset(torch, seed: int):
    """Synthetic classification data, a pure function of the seed."""
    from torch.utils.data import TensorDataset
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, DIM, generator=g)
    teacher = torch.randn(DIM, CLASSES, generator=g)
    y = (x @ teacher + 0.5 * torch.randn(SAMPLES, CLASSES, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_scaler(torch):
    """A disabled GradScaler (CPU), tracked to show the API. torch.amp.GradScaler arrived in
    torch 2.3 and torch.cuda.amp.GradScaler warns (deprecated) from 2.4; 1.13 has only the
    latter. Disabled, both save the same (empty) state, so checkpoints move between them."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cpu", enabled=False)
    return torch.cuda.amp.GradScaler(enabled=False)


def log(rank: int, text: str) -> None:
    if rank == 0:
        # One write per line (print makes two): under torchrun without --tee every rank
        # shares the launcher's stdout and stderr, and another rank's output may land between.
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


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

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    # gloo's threads start here; shielded, they never take a signal meant for this thread.
    with signals.shielded():
        if world > 1:
            dist.init_process_group("gloo")
        rank = dist.get_rank() if world > 1 else 0
        torch.manual_seed(args.seed)            # the same initial weights on every rank
        model = make_model(nn)
        train_model = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    # Per-rank streams for dropout, noise and loss scaling.
    torch.manual_seed(args.seed + 1 + rank)
    np.random.seed(args.seed + 1 + rank)
    random.seed(args.seed + 1 + rank)

    dataset = make_dataset(torch, args.seed)
    sampler = helper.ResumableSampler(len(dataset), args.seed, args.batch_size,
                                      num_replicas=world, rank=rank)
    # Own generator: a new DataLoader iterator must not draw from the global torch RNG.
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=0,
                        generator=torch.Generator().manual_seed(args.seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    scaler = make_scaler(torch)
    loss_fn = nn.CrossEntropyLoss()

    ckpt = helper.Checkpointer(args.ckpt_dir, pattern=args.pattern, keep=args.keep)
    ckpt.track(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
               sampler=sampler)
    try:
        loaded = ckpt.resume(args.resume_from, restore_rng=not args.break_rng_restore,
                             exclude=("sampler",) if args.break_data_restore else ())
    except helper.CheckpointError as e:
        print(f"[trainer] error: {e}", file=sys.stderr, flush=True)
        return leave(world, 1)
    step = loaded.step if loaded else 0
    if loaded:
        log(rank, f"[trainer] resumed from={loaded.path} step={step} "
                  f"rng={'yes' if loaded.rng_restored else 'no'}")
    else:
        log(rank, f"[trainer] start step=0 world={world}")

    heartbeat = helper.Heartbeat(args.heartbeat_file if rank == 0 else None, min_interval=0.5)
    train_model.train()
    try:
        stopped = False
        while step < args.steps and not stopped:
            for xb, yb in loader:
                noise = torch.from_numpy(np.random.standard_normal(xb.shape).astype(np.float32))
                xb = xb + 0.05 * noise
                loss = loss_fn(train_model(xb), yb) * (0.9 + 0.2 * random.random())
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                step += 1
                log(rank, f"step={step} loss={loss.item():.6f}")
                heartbeat.beat()
                if args.step_sleep > 0:
                    time.sleep(args.step_sleep)

                # Read once, agreed by every rank: all ranks save this step and stop
                # together; a signal that arrives during the save counts at the next step.
                stop, requested = signals.agree()
                periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
                if stop or requested or periodic:
                    reason = "stop" if stop else "signal" if requested else "periodic"
                    path = ckpt.save(step, extra={"epoch": sampler.epoch})
                    signals.clear_checkpoint()
                    log(rank, f"[trainer] saved step={step} reason={reason} path={path}")
                if stop:
                    log(rank, f"[trainer] stopping step={step}{describe_notice(signals)}")
                    stopped = True
                    break
                if step >= args.steps:
                    break

        if not stopped:
            if ckpt.last_saved_step != step:
                path = ckpt.save(step, extra={"epoch": sampler.epoch})
                log(rank, f"[trainer] saved step={step} reason=final path={path}")
            digest = helper.state_digest(model.state_dict())
            if rank == 0 and args.result_file:
                helper.atomic_write_text(args.result_file, digest + "\n")
            log(rank, f"[trainer] done step={step} digest={digest}")
    except helper.CheckpointError as e:     # every rank gets the same error from save()
        print(f"[trainer] error: {e}", file=sys.stderr, flush=True)
        return leave(world, 1)
    if world > 1:
        dist.barrier()
    return leave(world, 0)


def leave(world: int, code: int) -> int:
    """Return the exit code; under DDP leave at once instead.

    torch 1.13 + gloo can deadlock in teardown (~ProcessGroupGloo joins a worker thread
    that waits for the GIL held by the destructor's caller). Everything that matters is
    already durable, so a distributed worker flushes its output and exits immediately.
    """
    if world > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
