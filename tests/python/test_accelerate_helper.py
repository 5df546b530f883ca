"""spotvisor_helper.accelerate with the real accelerate (one process, CPU): save_state seals
`step-N` (every file of accelerate's save_state plus a manifest that verifies) and leaves no
temp directory, replacing one a killed save left; load_state restores the weights, the
optimizer and the scheduler and returns the step; a name without the step is refused. Without
accelerate, importing the module says what to install.

The accelerate part runs in a child process: Accelerator's state is a process-wide singleton.
Skips without accelerate (Debian's python3); the pinned PyPI environment has it.
"""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import harness

CHILD = r"""
import json, sys
from pathlib import Path
import torch
from accelerate import Accelerator
from spotvisor_helper.accelerate import load_state, save_state
from spotvisor_helper.errors import CheckpointError

root = Path(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
accelerator = Accelerator(cpu=True)
model, opt, sched = accelerator.prepare(model, opt, sched)
for _ in range(3):
    model(torch.ones(1, 4)).sum().backward(); opt.step(); sched.step(); opt.zero_grad()
stale = root / "ckpt" / ".tmp-step-3"
stale.mkdir(parents=True)
(stale / "junk.bin").write_bytes(b"left by a killed save")
path = save_state(accelerator, root / "ckpt", 3)
saved = {k: v.clone() for k, v in model.state_dict().items()}
lr = sched.get_last_lr()[0]

for _ in range(2):  # then train on: the weights, the optimizer and the LR move
    model(torch.ones(1, 4)).sum().backward(); opt.step(); sched.step(); opt.zero_grad()
moved = not all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
fresh = load_state(accelerator, None)
step = load_state(accelerator, path)
try:
    load_state(accelerator, root / "ckpt" / "latest")
    refused = ""
except CheckpointError as e:
    refused = str(e)
print(json.dumps({
    "path": str(path), "fresh": fresh, "step": step, "refused": refused,
    "moved": moved,
    "weights_equal": all(torch.equal(saved[k], v) for k, v in model.state_dict().items()),
    "lr_equal": sched.get_last_lr()[0] == lr,
    "adam_steps": [float(s["step"]) for s in opt.state_dict()["state"].values()],
}))
"""


@unittest.skipUnless(harness.has_module("accelerate") and harness.HAS_TORCH,
                     "accelerate is not installed (the pinned PyPI environment has it)")
class AccelerateHelperTest(unittest.TestCase):

    def test_save_seals_step_n_and_load_returns_the_step(self):
        from spotvisor_helper.manifest import verify_manifest
        from spotvisor_helper.names import NamePattern
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, "-c", CHILD, tmp], env=harness.child_env(),
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-4000:])
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            ckpt = Path(tmp) / "ckpt"
            self.assertEqual(sorted(p.name for p in ckpt.iterdir()), ["step-3"], "the temp dir is gone")
            self.assertEqual(out["path"], str(ckpt / "step-3"))
            self.assertEqual(NamePattern("step-{step}").match("step-3"), 3)
            names = {p.name for p in (ckpt / "step-3").iterdir()}
            for name in ("model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl",
                         "spotvisor.manifest.json"):
                self.assertIn(name, names)
            self.assertNotIn("junk.bin", names, "the stale temp dir was reused without clearing it")
            manifest = verify_manifest(ckpt / "step-3")
            self.assertEqual(len(manifest.files), len(names) - 1)
            self.assertEqual(out["fresh"], 0)
            self.assertEqual(out["step"], 3)
            self.assertTrue(out["moved"], "training after the save changed nothing")
            self.assertTrue(out["weights_equal"])
            self.assertTrue(out["lr_equal"])
            self.assertEqual(out["adam_steps"], [3.0, 3.0])
            self.assertIn("latest", out["refused"])
            self.assertIn("step-{step}", out["refused"])


class AccelerateMissingTest(unittest.TestCase):

    def test_import_without_accelerate_says_what_to_install(self):
        code = "import sys; sys.modules['accelerate'] = None; import spotvisor_helper.accelerate"
        proc = subprocess.run([sys.executable, "-c", code], env=harness.child_env(),
                              capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("ImportError: spotvisor_helper.accelerate needs Hugging Face accelerate "
                      "(pip install accelerate)", proc.stderr)


if __name__ == "__main__":
    unittest.main()
