"""A small DeepSpeed job that runs on CPUs, protected by spotvisor.

A seeded two-layer network learns a fixed synthetic regression (in memory, no download)
through `deepspeed.initialize` (ZeRO stage 1, fp32, a torch AdamW and a StepLR that
DeepSpeed saves with the engine). What makes it spotvisor's is marked `# spotvisor`: the
signal flags, agreed across ranks at the end of every step; on a notice, a checkpoint
request or the periodic schedule, every rank calls `engine.save_checkpoint(dir,
tag="global_stepN")` (DeepSpeed's own layout: rank 0 writes `latest` after its files);
the resume with `engine.load_checkpoint` from `--resume-from`, which spotvisor appends with
the newest good checkpoint (`resume_args` in job.yaml).

    spotvisor run --config examples/deepspeed/job.yaml

Two processes on the CPU with gloo: `deepspeed --num_gpus 2` (DeepSpeed's CPU accelerator
when there is no GPU; DS_ACCELERATOR=cpu forces it). Deterministic: the batches of a step
depend only on (seed, step), so a run resumed from any checkpoint ends with the weights of
an uninterrupted one; `--result-file` gets their SHA-256, which `spotvisor drill` compares.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # the repo's helper
from spotvisor_helper import SignalFlags  # noqa: E402  # spotvisor

flags = SignalFlags()  # spotvisor: SIGTERM = save and exit, SIGUSR1 = save; before anything slow

import deepspeed  # noqa: E402
import torch  # noqa: E402

SAMPLES, BATCH = 512, 8  # BATCH per rank and step


def say(rank: int, text: str) -> None:
    """One line in one write: the ranks share the launcher's stdout."""
    sys.stdout.write(f"[deepspeed] rank={rank} {text}\n")
    sys.stdout.flush()


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def batch_of(step: int, rank: int, world: int, inputs: torch.Tensor, targets: torch.Tensor):
    """This rank's slice of step `step`'s batch: the epoch's order comes from (seed, epoch)
    alone, so a resumed run reads exactly what the uninterrupted one read at this step."""
    per_epoch = SAMPLES // (BATCH * world)
    epoch, index = divmod(step, per_epoch)
    order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(1000 + epoch))
    first = (index * world + rank) * BATCH
    take = order[first:first + BATCH]
    return inputs[take], targets[take]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint-dir", required=True, help="checkpoints.dir: global_stepN/ are written here")
    p.add_argument("--resume-from", default=None)  # spotvisor: resume_args
    p.add_argument("--result-file", default=None)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--width", type=int, default=64, help="hidden units (more: bigger checkpoints)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds of other work per step")
    p.add_argument("--local_rank", type=int, default=0)  # the launcher passes it
    args = p.parse_args()

    # Signals blocked while the process group starts its gloo threads: a signal taken on
    # such a thread interrupts its socket calls and can hang the ranks.
    with flags.shielded():  # spotvisor
        deepspeed.init_distributed(dist_backend="gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    inputs = torch.randn(SAMPLES, 16, generator=g)
    targets = torch.sin(inputs.sum(dim=1, keepdim=True))
    model = torch.nn.Sequential(torch.nn.Linear(16, args.width), torch.nn.Tanh(), torch.nn.Linear(args.width, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.9)
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 1},
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }
    with flags.shielded():  # spotvisor
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                               config=config)

    step = 0
    if args.resume_from:  # spotvisor: .../global_stepN, the newest good checkpoint
        resume = Path(args.resume_from)
        path, client = engine.load_checkpoint(str(resume.parent), tag=resume.name)
        if path is None:
            raise SystemExit(f"deepspeed could not load {resume}")
        step = int(client["step"])
    say(rank, f"pid={os.getpid()} start step={step} resume={args.resume_from}")
    while step < args.steps:
        x, y = batch_of(step, rank, world, inputs, targets)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()  # the optimizer and the scheduler
        step += 1
        time.sleep(args.step_sleep)
        stop, requested = flags.agree()  # spotvisor: the same answer on every rank
        if stop or requested or step % args.save_every == 0:
            tag = f"global_step{step}"  # spotvisor: checkpoints.pattern "global_step{step}"
            engine.save_checkpoint(args.checkpoint_dir, tag=tag, client_state={"step": step})
            flags.clear_checkpoint()
            say(rank, f"saved step={step} {tag}")
        if stop:
            say(rank, f"stopped at step={step}")
            return 0  # spotvisor restarts or drains: a stop is not a failure

    digest = weights_digest(engine.module)
    say(rank, f"done step={step} digest={digest}")
    if args.result_file and rank == 0:
        Path(args.result_file).write_text(digest + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
