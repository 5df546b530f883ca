"""A small GPT trained the way most single-file training scripts are written.

The shape spotvisor must take as it is (README: "Your script as it is"): settings as
`--key=value` overrides of module-level defaults; every `eval_interval` iterations the
whole state goes to `out_dir/ckpt.pt` with one `torch.save`, over the previous file; no
signal handler (a SIGTERM ends it where it is); `--init_from=resume` continues from
`out_dir/ckpt.pt`; one line per iteration. Nothing in it knows about spotvisor.

It is deterministic on a CPU: each iteration's batch is drawn from a generator seeded with
(seed, iteration), there is no dropout, and the optimizer's state is in the checkpoint, so
a run resumed from any of its checkpoints ends with the weights of an uninterrupted one.

    python3 train.py --out_dir=out --max_iters=200 --eval_interval=20
    python3 train.py --out_dir=out --max_iters=200 --eval_interval=20 --init_from=resume
"""

import math
import os
import sys
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

# Defaults, each overridable as --name=value.
out_dir = "out"
init_from = "scratch"  # or "resume": continue from out_dir/ckpt.pt
eval_interval = 20  # save every this many iterations
max_iters = 200
batch_size = 8
block_size = 32
vocab_size = 256
n_layer = 2
n_head = 4
n_embd = 64
learning_rate = 1e-3
seed = 1337
iter_sleep = 0.0  # seconds per iteration, standing in for the GPU's work


def configure(argv):
    """`--name=value` for each default above, parsed as the default's type."""
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            sys.exit(f"train.py: expected --name=value, got {arg!r}")
        name, value = arg[2:].split("=", 1)
        if name not in globals() or name.startswith("_") or callable(globals()[name]):
            sys.exit(f"train.py: unknown setting {name!r}")
        globals()[name] = type(globals()[name])(value)


class Block(nn.Module):

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.attn(self.ln_1(x)).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def get_batch(it):
    """Iteration `it`'s batch: the same on every run, resumed or not."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + it)
    data = torch.randint(vocab_size, (batch_size, block_size + 1), generator=g)
    # A learnable rule: every token after the first is the previous one plus one.
    data[:, 1:] = (data[:, :1] + torch.arange(1, block_size + 1)) % vocab_size
    return data[:, :-1], data[:, 1:]


def main():
    configure(sys.argv[1:])
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    os.makedirs(out_dir, exist_ok=True)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    iter_num = 0
    if init_from == "resume":
        checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        iter_num = checkpoint["iter_num"]
        print(f"resuming from iteration {iter_num}", flush=True)
    while True:
        if iter_num % eval_interval == 0 and iter_num > 0:
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}
            print(f"saving checkpoint to {out_dir}")
            torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
        if iter_num >= max_iters:
            break
        t0 = time.time()
        x, y = get_batch(iter_num)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        time.sleep(iter_sleep)
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {(time.time() - t0) * 1000:.2f}ms")
        iter_num += 1


if __name__ == "__main__":
    main()
