"""A small PyTorch Lightning job that runs on a CPU, protected by spotvisor.

A two-layer MLP learns a fixed random regression from an in-memory data set (no download).
The lines that make it spotvisor's are marked `# spotvisor`: the signal flags (set up before
the slow imports), the callback (a save on every notice or checkpoint request), the resumable
data loader (an interrupted epoch goes on where it stopped), and the resume from `--ckpt_path`,
which spotvisor appends with the newest good checkpoint (`resume_args` in job.yaml).

    spotvisor run --config examples/lightning/job.yaml

Under torchrun (`torchrun --nproc_per_node 2 train.py ...`) the Trainer reads the launcher's
environment and runs DDP on gloo with one process per rank.

Deterministic (seeded, no dropout, the data order a function of the seed and the epoch): an
uninterrupted run and a run resumed from any complete checkpoint end with the same weights;
`--result-file` gets their SHA-256, which `spotvisor drill` compares.
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

signals = SignalFlags()  # spotvisor: before the slow imports, so a notice is never missed

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402

from spotvisor_helper.lightning import ResumableDataLoader, SpotvisorCallback  # noqa: E402  # spotvisor


class Points(torch.utils.data.Dataset):
    """`size` fixed random inputs and their targets: the same data on every run."""

    def __init__(self, size: int, features: int, load_sleep: float) -> None:
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(size, features, generator=g)
        self.y = torch.sin(self.x @ torch.randn(features, 1, generator=g))
        self.load_sleep = load_sleep

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.load_sleep:
            time.sleep(self.load_sleep)  # data loading that takes time, as real loading does
        return self.x[i], self.y[i]


class Regression(L.LightningModule):
    def __init__(self, features: int, width: int, batch_size: int, load_sleep: float) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.Tanh(),
                                       torch.nn.Linear(width, 1))
        self.data = Points(512, features, load_sleep)
        self.batch_size = batch_size

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def train_dataloader(self):
        return ResumableDataLoader(self.data, self.batch_size, seed=0,  # spotvisor: exact mid-epoch resume
                                   num_replicas=self.trainer.world_size, rank=self.trainer.global_rank)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", required=True, help="where checkpoints go = checkpoints.dir")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--save-every", type=int, default=100, help="ModelCheckpoint's every_n_train_steps")
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--width", type=int, default=64, help="hidden units (a larger checkpoint)")
    p.add_argument("--load-sleep", type=float, default=0.0, help="seconds per sample loaded")
    p.add_argument("--result-file", default=None)
    p.add_argument("--ckpt_path", default=None)  # spotvisor: resume_args
    args = p.parse_args()

    L.seed_everything(0, verbose=False)
    model = Regression(16, args.width, args.batch_size, args.load_sleep)
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's, else one process
    trainer = L.Trainer(
        accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
        max_steps=args.steps, max_epochs=-1, deterministic=True, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False,  # spotvisor: ResumableDataLoader shards by rank itself
        default_root_dir=args.ckpt_dir,
        callbacks=[SpotvisorCallback(args.ckpt_dir, signals=signals),  # spotvisor
                   ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.save_every,
                                   save_top_k=-1)])
    rank = trainer.global_rank
    print(f"[lightning] rank={rank} start resume={args.ckpt_path}", flush=True)
    trainer.fit(model, ckpt_path=args.ckpt_path)  # spotvisor: None = fresh
    step = trainer.global_step
    if step < args.steps:
        print(f"[lightning] rank={rank} stopped at step={step}", flush=True)
        return 0  # spotvisor restarts or drains: a stop is not a failure
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    print(f"[lightning] rank={rank} done step={step} digest={digest.hexdigest()}", flush=True)
    if args.result_file and rank == 0:
        Path(args.result_file).write_text(digest.hexdigest() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
