"""A small Hugging Face Trainer job that runs on a CPU, protected by spotvisor.

A two-layer GPT-2 built from a config (no download) learns a synthetic token sequence. The
lines that make it spotvisor's are marked `# spotvisor`: the signal flags, set up before the
slow imports (a notice while transformers loads is kept, not fatal), the callback (a save on
every notice or checkpoint request), and the resume from `--resume_from_checkpoint`, which
spotvisor appends with the newest good checkpoint (`resume_args` in job.yaml).

    spotvisor run --config examples/hf_trainer/job.yaml

Deterministic (seeded, no dropout, `dataloader_num_workers=0`): an uninterrupted run and a
run resumed from any complete checkpoint end with the same weights; `--result-file` gets
their SHA-256, which `spotvisor drill` compares.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # the repo's helper
from spotvisor_helper import SignalFlags  # noqa: E402  # spotvisor (standard library only)

signals = SignalFlags()  # spotvisor: first, so a notice during the slow imports below is kept

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from spotvisor_helper.hf import SpotvisorCallback  # noqa: E402  # spotvisor


class Tokens(torch.utils.data.Dataset):
    """`size` windows of a fixed pseudo-random sequence: the same data on every run."""

    def __init__(self, size: int, length: int, vocab: int, load_sleep: float) -> None:
        g = torch.Generator().manual_seed(1234)
        self.data = torch.randint(0, vocab, (size, length), generator=g)
        self.load_sleep = load_sleep

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict:
        if self.load_sleep:
            time.sleep(self.load_sleep)  # data loading that takes time, as real loading does
        ids = self.data[i]
        return {"input_ids": ids, "labels": ids}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output-dir", required=True, help="the Trainer's output_dir = checkpoints.dir")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--save-steps", type=int, default=40)
    p.add_argument("--load-sleep", type=float, default=0.0, help="seconds per sample loaded")
    p.add_argument("--result-file", default=None)
    p.add_argument("--resume_from_checkpoint", default=None)  # spotvisor: resume_args
    args = p.parse_args()

    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, save_strategy="steps",
        save_steps=args.save_steps, save_total_limit=None, per_device_train_batch_size=4,
        learning_rate=1e-3, logging_steps=10, report_to=[], seed=0, data_seed=0,
        dataloader_num_workers=0, use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(256, 16, 64, args.load_sleep),
                      callbacks=[SpotvisorCallback(signals)])  # spotvisor
    print(f"[hf] start resume={args.resume_from_checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)  # spotvisor: None = fresh
    step = trainer.state.global_step
    if step < args.steps:
        print(f"[hf] stopped at step={step} (saved checkpoint-{step})", flush=True)
        return 0  # spotvisor restarts or drains: a stop is not a failure
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    print(f"[hf] done step={step} digest={digest.hexdigest()}", flush=True)
    if args.result_file and trainer.is_world_process_zero():  # under torchrun: rank 0 writes it
        Path(args.result_file).write_text(digest.hexdigest() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
