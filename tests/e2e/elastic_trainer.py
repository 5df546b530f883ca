#!/usr/bin/python3
"""A DDP trainer whose result does not depend on the world size (tests/e2e/test_multinode.py
GroupShrinks): a group that shrinks and grows back must end within float tolerance of an
uninterrupted run.

The global batch is fixed (`ResumableSampler(global_batch_size=...)`): every step sees the
same samples whatever the number of ranks, each rank a slice of them. Nothing random
depends on the rank (no dropout, no per-rank noise), and each rank's loss is the mean of its
slice, so DDP's average over ranks is the global batch's mean gradient: the same update up
to the floating-point summation order. At every step the ranks agree on spotvisor's signals
(SignalFlags.agree): SIGTERM saves and exits (with --dies-on-stop it ends the process), SIGUSR1
saves and goes on.

Output (rank 0): [elastic] start|resumed step=S world=W, step=N, [elastic] saved step=S
reason=R, [elastic] done step=S. The final weights go to --result-file (torch.save).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import spotvisor_helper as helper  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--result-file", required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--global-batch-size", type=int, default=48)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--step-sleep", type=float, default=0.0)
    # The step's time spent computing (a busy loop) rather than asleep: a trainer that uses its
    # CPU, as a real one does, so that a cut-off node's spotvisor sees it progress.
    p.add_argument("--busy", action="store_true")
    p.add_argument("--resume_from", default=None)
    # The shape of most scripts: the stop signal ends the process (no save on it); a
    # checkpoint request (SIGUSR1) is still answered.
    p.add_argument("--dies-on-stop", action="store_true")
    args = p.parse_args()
    signals = helper.SignalFlags(notice=None) if args.dies_on_stop else helper.SignalFlags()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    with signals.shielded():
        if world > 1:
            dist.init_process_group("gloo")
        rank = dist.get_rank() if world > 1 else 0
        torch.manual_seed(7)
        model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
        train_model = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    g = torch.Generator().manual_seed(11)
    x = torch.randn(960, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(dim=1)
    sampler = helper.ResumableSampler(len(x), 13, global_batch_size=args.global_batch_size,
                                      num_replicas=world, rank=rank)
    loader = DataLoader(TensorDataset(x, y), batch_sampler=sampler, num_workers=0,
                        generator=torch.Generator().manual_seed(13))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = helper.Checkpointer(args.ckpt_dir, keep=0).track(model=model, optimizer=optimizer, sampler=sampler)

    def say(text: str) -> None:
        if rank == 0:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    loaded = ckpt.resume(args.resume_from)
    step = loaded.step if loaded else 0
    say(f"[elastic] {'resumed' if loaded else 'start'} step={step} world={world}")
    loss_fn = nn.CrossEntropyLoss()
    stopped = False
    while step < args.steps and not stopped:
        for xb, yb in loader:
            if args.step_sleep > 0 and args.busy:
                end = time.monotonic() + args.step_sleep
                while time.monotonic() < end:
                    pass
            elif args.step_sleep > 0:
                time.sleep(args.step_sleep)  # the step's compute: its update lands at its end
            loss = loss_fn(train_model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            say(f"step={step} world={world}")
            stop, requested = signals.agree()
            if stop or requested or step % args.checkpoint_every == 0:
                ckpt.save(step)
                signals.clear_checkpoint()
                say(f"[elastic] saved step={step} reason={'stop' if stop else 'request' if requested else 'periodic'}")
            if stop:
                stopped = True
                break
            if step >= args.steps:
                break
    if not stopped:
        if rank == 0:
            torch.save(model.state_dict(), args.result_file + ".tmp")
            os.replace(args.result_file + ".tmp", args.result_file)
        say(f"[elastic] done step={step}")
    if world > 1:
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)  # torch 1.13 + gloo can deadlock in teardown (see examples/torch_trainer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
