"""Real DDP (gloo, CPU processes) across world sizes with ResumableSampler's fixed global
batch: a run that trains on 2 processes, then 1, then 3 (each leg resuming from the state
the last one saved: weights, optimizer, rank 0's sampler state) ends with the weights of
the uninterrupted one-process run, up to floating-point summation order. What a group
that shrinks and grows back relies on (issue 23).

Each leg is one `python -c` per rank (a file store, no port), so nothing here depends on
how the test runner was started.
"""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import harness

WORKER = r"""
import json, os, sys, torch, torch.distributed as dist
sys.path.insert(0, sys.argv[1])
from spotvisor_helper import ResumableSampler
store, world, rank, steps, state_in, state_out = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
per_rank = sys.argv[8] == "per-rank"  # the control: 12 per rank, so the global batch grows with the world
torch.set_num_threads(1)
if world > 1:
    dist.init_process_group("gloo", init_method="file://" + store, world_size=world, rank=rank)
g = torch.Generator().manual_seed(0)
x = torch.randn(96, 8, generator=g)
y = x @ torch.randn(8, 3, generator=g) + 0.1 * torch.randn(96, 3, generator=g)
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).double()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
if per_rank:
    sampler = ResumableSampler(96, seed=5, batch_size=12, num_replicas=world, rank=rank)
else:
    sampler = ResumableSampler(96, seed=5, global_batch_size=12, num_replicas=world, rank=rank)
if state_in != "-":
    saved = torch.load(state_in)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    sampler.load_state_dict(saved["sampler"])
net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
done = 0
while done < steps:
    for batch in sampler:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x[batch].double()), y[batch].double())
        loss.backward()  # DDP averages the ranks' gradients: the mean over the global batch
        opt.step()
        done += 1
        if done == steps:
            break
if rank == 0:
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sampler": sampler.state_dict()}, state_out)
if world > 1:
    # Leave as examples/torch_trainer/train.py does: when every rank is past its last collective
    # (and rank 0's save is on disk), at once. torch 2.x's destroy_process_group() does not end
    # gloo (no shutdown for it; its threads and pairs live on), so they were torn down by the
    # exit-time destructors, racing with the peer that had already gone: "terminate called
    # without an active exception" (-6) now and then. torch 1.13 can deadlock there instead.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
"""


@unittest.skipUnless(harness.HAS_TORCH, "torch is not installed")
class AcrossWorldSizes(unittest.TestCase):

    def leg(self, work: Path, name: str, world: int, steps: int, state_in: str, batch: str = "global") -> str:
        store = work / f"{name}.store"
        out = work / f"{name}.pt"
        procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(harness.PYTHON_DIR), str(store), str(world),
                                   str(rank), str(steps), state_in, str(out), batch],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
                 for rank in range(world)]
        for rank, p in enumerate(procs):
            output, _ = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, f"{name} rank {rank}:\n{output[-3000:]}")
        return str(out)

    def test_two_then_one_then_three_processes_end_with_the_one_process_weights(self):
        import torch
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            # 8 steps an epoch (96 / 12): the legs cut mid-epoch and cross epochs.
            reference = self.leg(work, "reference", 1, 30, "-")
            state = self.leg(work, "world2", 2, 11, "-")
            state = self.leg(work, "world1", 1, 6, state)
            state = self.leg(work, "world3", 3, 13, state)
            want, got = torch.load(reference), torch.load(state)
            self.assertEqual(got["sampler"]["epoch"], want["sampler"]["epoch"])
            self.assertEqual(got["sampler"]["samples"], want["sampler"]["samples"])
            diff = max((want["model"][k] - got["model"][k]).abs().max().item() for k in want["model"])
            scale = max(v.abs().max().item() for v in want["model"].values())
            print(f"\n[sampler] DDP on 2, 1, 3 processes vs 1: max weight difference {diff:.2e} (weights up to "
                  f"{scale:.2f}); sampler at epoch {got['sampler']['epoch']} sample {got['sampler']['samples']}",
                  file=sys.stderr)
            self.assertLess(diff, 1e-9, "not the one-process run's weights (float64: only summation order differs)")
            # The control: 12 samples per rank (the global batch grows to 24 on 2 processes)
            # ends elsewhere, so the comparison above can tell.
            state = self.leg(work, "control2", 2, 11, "-", "per-rank")
            state = self.leg(work, "control1", 1, 6, state, "per-rank")
            control = torch.load(state)
            off = max((want["model"][k] - control["model"][k]).abs().max().item() for k in want["model"])
            self.assertGreater(off, 1e-4, "a per-rank batch on 2 processes should train differently")


if __name__ == "__main__":
    unittest.main()
