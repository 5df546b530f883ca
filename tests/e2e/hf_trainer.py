#!/usr/bin/python3
"""A trainer that saves the way Hugging Face `Trainer` does: IN PLACE, no temp dir, no rename.

Every --save-steps it creates `<output-dir>/checkpoint-<step>/` and writes into it, one file
after another (torch.save for `pytorch_model.bin`, `optimizer.pt`, `scheduler.pt`,
`rng_state.pth`), then `trainer_state.json` last — the file HF's own resume logic reads
first. Each file is written in chunks with --write-sleep between them, so a test can
SIGKILL it mid-write and leave a half-written directory with the final name: exactly the
checkpoint spotvisor must never resume from (`checkpoints.format: hf`).

Deterministic: the batch of step s is a pure function of (--seed, s); dropout uses the
torch RNG, saved in `rng_state.pth`. An uninterrupted run and any run resumed from a
complete checkpoint end with the same SHA-256 of the final weights (--result-file).

  --resume_from_checkpoint PATH   resume (spotvisor: resume_args ["--resume_from_checkpoint", "{checkpoint}"])

Output lines: `[hf] start`, `[hf] resumed from=PATH step=S`, `step=S loss=L`,
`[hf] writing checkpoint-S`, `[hf] wrote checkpoint-S`, `[hf] done step=S digest=HEX`.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import sys
import time
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output-dir", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--save-steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--write-sleep", type=float, default=0.0,
                   help="sleep after every chunk written (so a kill lands mid-write)")
    p.add_argument("--chunks", type=int, default=4, help="chunks per file")
    p.add_argument("--result-file", default=None)
    p.add_argument("--resume_from_checkpoint", "--resume-from-checkpoint", dest="resume", default=None)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    from torch import nn

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, 48), nn.ReLU(), nn.Dropout(0.25), nn.Linear(48, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.7)
    teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(args.seed + 1))
    torch.manual_seed(args.seed + 2)
    random.seed(args.seed + 3)

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    step = 0
    if args.resume:
        ckpt = Path(args.resume)
        # Like HF: trainer_state.json first; a directory without it is not a checkpoint.
        state = json.loads((ckpt / "trainer_state.json").read_text())
        model.load_state_dict(torch.load(ckpt / "pytorch_model.bin"))
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt"))
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt"))
        rng = torch.load(ckpt / "rng_state.pth")
        torch.set_rng_state(rng["cpu"])
        random.setstate(rng["python"])
        step = int(state["global_step"])
        print(f"[hf] resumed from={ckpt} step={step}", flush=True)
    else:
        print("[hf] start step=0", flush=True)

    def write_in_place(path: Path, data: bytes) -> None:
        size = max(1, -(-len(data) // args.chunks))
        with open(path, "wb") as f:
            for at in range(0, len(data), size):
                f.write(data[at:at + size])
                f.flush()
                if args.write_sleep > 0:
                    time.sleep(args.write_sleep)

    def save(step: int) -> None:
        d = out / f"checkpoint-{step}"
        print(f"[hf] writing {d.name}", flush=True)
        d.mkdir(exist_ok=True)
        rng = {"cpu": torch.get_rng_state(), "python": random.getstate()}
        for name, obj in (("pytorch_model.bin", model.state_dict()), ("optimizer.pt", optimizer.state_dict()),
                          ("scheduler.pt", scheduler.state_dict()), ("rng_state.pth", rng)):
            buf = io.BytesIO()
            torch.save(obj, buf)
            write_in_place(d / name, buf.getvalue())
        state = {"global_step": step, "epoch": None, "max_steps": args.steps,
                 "log_history": [{"step": step, "loss": last_loss}], "best_metric": None,
                 "best_model_checkpoint": None, "is_world_process_zero": True}
        write_in_place(d / "trainer_state.json", json.dumps(state, indent=2).encode())
        print(f"[hf] wrote {d.name}", flush=True)

    loss_fn = nn.CrossEntropyLoss()
    last_loss = None
    model.train()
    while step < args.steps:
        g = torch.Generator().manual_seed(args.seed * 100003 + step)
        x = torch.randn(32, 16, generator=g)
        y = (x @ teacher).argmax(dim=1)
        loss = loss_fn(model(x), y) * (0.9 + 0.2 * random.random())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        last_loss = round(loss.item(), 6)
        print(f"step={step} loss={last_loss}", flush=True)
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        if step % args.save_steps == 0 or step == args.steps:
            save(step)

    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode() + str(tensor.dtype).encode() + str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    digest = h.hexdigest()
    if args.result_file:
        tmp = args.result_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(digest + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, args.result_file)
    print(f"[hf] done step={step} digest={digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
