#!/usr/bin/python3
"""A PyTorch trainer in the shape most are written, with checkpoints big enough that their
upload to an object store takes seconds (tests/e2e/test_durable.py).

A loop of SGD steps on a small regression (data order and input dropout from torch's
global RNG, momentum in the optimizer) that also carries a large table of float32 state
(an embedding, say) updated every step. Every --checkpoint-every steps, and at the next
step boundary after a SIGTERM (then it exits 0), it saves `ckpt_step<step>/` with one
`torch.save` per file: `model.pt` (model, optimizer, RNG, step) and the table in
--shards files `shard-NN.pt` of --shard-mib MiB each, written under a temporary name and
renamed into place. `--resume_from DIR` continues from such a directory. Everything that
shapes the result is saved, so only an exact resume reproduces an uninterrupted run's
final state, whose SHA-256 goes to --result-file.

Output lines (stable, for the tests):
  [trainer] start step=0                    [trainer] resumed from=PATH step=S
  step=S loss=L                             [trainer] saved step=S reason=R path=PATH
  [trainer] stopping step=S                 [trainer] done step=S digest=HEX
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import torch

DIM, SAMPLES, BATCH, KEEP_PROB = 16, 256, 8, 0.9


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--checkpoint-every", type=int, default=30)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step (not in the result)")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--shard-mib", type=float, default=1.0)
    p.add_argument("--resume_from", "--resume-from", dest="resume_from", default=None)
    p.add_argument("--result-file", default=None)
    p.add_argument("--seed", type=int, default=11)
    return p.parse_args(argv)


stop_requested = False


def on_sigterm(signum, frame) -> None:
    global stop_requested
    stop_requested = True


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(ckpt_dir: Path, step: int, model, opt, table: torch.Tensor, shards: int) -> Path:
    final = ckpt_dir / f"ckpt_step{step}"
    tmp = ckpt_dir / f".tmp-ckpt_step{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state(),
                "step": step}, tmp / "model.pt")
    for i, chunk in enumerate(table.chunk(shards)):
        # clone(): torch.save of a view writes its whole storage.
        torch.save(chunk.clone(), tmp / f"shard-{i:02d}.pt")
    for f in tmp.iterdir():
        with open(f, "rb+") as fh:
            os.fsync(fh.fileno())
    os.rename(tmp, final)
    fsync_dir(ckpt_dir)
    return final


def digest(model, table: torch.Tensor, step: int) -> str:
    h = hashlib.sha256(str(step).encode())
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.contiguous().numpy().tobytes())
    h.update(table.numpy().tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data_gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(SAMPLES, DIM, generator=data_gen)
    w_true = torch.randn(DIM, generator=data_gen)
    y = x @ w_true + 0.5 + 0.1 * torch.randn(SAMPLES, generator=data_gen)
    model = torch.nn.Linear(DIM, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    numel = int(args.shards * args.shard_mib * (1 << 20)) // 4
    table = torch.randn(numel, generator=data_gen)
    ckpt_dir = Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    step = 0
    if args.resume_from:
        src = Path(args.resume_from)
        state = torch.load(src / "model.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        step = int(state["step"])
        table = torch.cat([torch.load(src / f"shard-{i:02d}.pt") for i in range(args.shards)])
        print(f"[trainer] resumed from={src} step={step}", flush=True)
    else:
        print("[trainer] start step=0", flush=True)

    last_saved = step if args.resume_from else None
    while step < args.steps:
        idx = torch.randint(0, SAMPLES, (BATCH,))
        mask = (torch.rand(BATCH, DIM) < KEEP_PROB).float() / KEEP_PROB
        loss = ((model(x[idx] * mask).squeeze(1) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        table.mul_(0.999).add_(loss.item() * 1e-3)
        step += 1
        print(f"step={step} loss={loss.item():.6f}", flush=True)
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        stop = stop_requested
        if stop or step % args.checkpoint_every == 0:
            path = save(ckpt_dir, step, model, opt, table, args.shards)
            last_saved = step
            print(f"[trainer] saved step={step} reason={'stop' if stop else 'periodic'} path={path}", flush=True)
        if stop:
            print(f"[trainer] stopping step={step}", flush=True)
            return 0

    if last_saved != step:
        path = save(ckpt_dir, step, model, opt, table, args.shards)
        print(f"[trainer] saved step={step} reason=final path={path}", flush=True)
    d = digest(model, table, step)
    if args.result_file:
        tmp = args.result_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(d + "\n")
        os.replace(tmp, args.result_file)
    print(f"[trainer] done step={step} digest={d}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
