"""A small Hugging Face accelerate job that runs on CPUs, protected by spotvisor.

A seeded two-layer network learns a fixed synthetic regression (in memory, no download) in
an ordinary accelerate loop. What makes it spotvisor's is marked `# spotvisor`: the signal
flags, agreed across ranks at the end of every step; a save on a notice, a checkpoint
request or the periodic schedule; the resume from `--resume-from`, which spotvisor appends
with the newest good checkpoint (`resume_args` in job.yaml).

    spotvisor run --config examples/accelerate/job.yaml

Two processes on the CPU with gloo: `accelerate launch --multi_gpu --num_processes 2`
(torchrun's launcher; `--cpu --num_processes 2` runs ONE process unless an mpirun hostfile
is given) and `Accelerator(cpu=True)` here. Deterministic (seeded, no dropout, the seedable
sampler, num_workers=0): a run resumed from any checkpoint ends with the weights of an
uninterrupted one; `--result-file` gets their SHA-256, which `spotvisor drill` compares.
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

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import DataLoaderConfiguration, set_seed  # noqa: E402

from spotvisor_helper.accelerate import load_state, save_state  # noqa: E402  # spotvisor


def say(rank: int, text: str) -> None:
    """One line in one write: the ranks share the launcher's stdout, and print()'s separate
    write of the newline lets another rank's line land in between."""
    sys.stdout.write(f"[accelerate] rank={rank} {text}\n")
    sys.stdout.flush()


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint-dir", required=True, help="checkpoints.dir: step-N/ are written here")
    p.add_argument("--resume-from", default=None)  # spotvisor: resume_args
    p.add_argument("--result-file", default=None)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--width", type=int, default=64, help="hidden units (more: bigger checkpoints)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds of other work per step")
    args = p.parse_args()

    # Signals blocked while the process group and DDP start their gloo threads: a signal
    # taken on such a thread interrupts its socket calls and can hang the ranks.
    with flags.shielded():  # spotvisor
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    set_seed(0)
    g = torch.Generator().manual_seed(1234)
    inputs = torch.randn(512, 16, generator=g)
    targets = torch.sin(inputs.sum(dim=1, keepdim=True))
    data = torch.utils.data.TensorDataset(inputs, targets)
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(16, args.width), torch.nn.Tanh(), torch.nn.Linear(args.width, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.9)
    with flags.shielded():  # spotvisor
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    step = load_state(accelerator, args.resume_from)  # spotvisor: 0 = fresh
    rank = accelerator.process_index
    say(rank, f"pid={os.getpid()} start step={step} resume={args.resume_from}")
    while step < args.steps:
        epoch, done = divmod(step, len(loader))  # the data position: batches of this epoch done
        loader.set_epoch(epoch)  # the epoch's order depends only on (seed, epoch)
        for x, y in accelerator.skip_first_batches(loader, done) if done else loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            time.sleep(args.step_sleep)
            stop, requested = flags.agree()  # spotvisor: the same answer on every rank
            if stop or requested or step % args.save_every == 0:
                path = save_state(accelerator, args.checkpoint_dir, step)  # spotvisor
                flags.clear_checkpoint()
                say(rank, f"saved step={step} {path.name}")
            if stop:
                say(rank, f"stopped at step={step}")
                return 0  # spotvisor restarts or drains: a stop is not a failure
            if step == args.steps:
                break

    digest = weights_digest(accelerator.unwrap_model(model))
    say(rank, f"done step={step} digest={digest}")
    if args.result_file and accelerator.is_main_process:
        Path(args.result_file).write_text(digest + "\n")
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
