"""spotvisor_helper.lightning: importing the helper never imports Lightning; without Lightning
the module says what to install; with the real Lightning (the pinned torch 2 environment),
SpotvisorCallback saves a resumable `epoch=E-step=S.ckpt` on a request and stops on a stop,
and ResumableDataLoader goes on from where its saved state says."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import harness
from harness import PYTHON_DIR, child_env

HAS_LIGHTNING = harness.has_module("lightning")

# Makes `import lightning` fail in a child, as on a machine without it.
BLOCK_LIGHTNING = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "lightning" or name.startswith("lightning."):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Block())
"""


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=child_env(), cwd=str(PYTHON_DIR))


class ImportRules(unittest.TestCase):

    def test_the_helper_never_imports_lightning(self):
        out = run_child("import sys, spotvisor_helper\n"
                        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'torch')))")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "[]")

    def test_without_lightning_the_error_says_what_to_install(self):
        out = run_child(BLOCK_LIGHTNING + "import spotvisor_helper.lightning\n")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("ImportError: spotvisor_helper.lightning needs PyTorch Lightning 2.x (pip install lightning)",
                      out.stderr)


@unittest.skipUnless(HAS_LIGHTNING, "lightning is not installed (the pinned torch 2 environment has it)")
class WithLightning(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        import torch
        cls.torch = torch
        cls.data = torch.utils.data.TensorDataset(torch.arange(40.0).unsqueeze(1))

    def loader(self):
        from spotvisor_helper.lightning import ResumableDataLoader
        return ResumableDataLoader(self.data, 4, seed=3)

    def batches(self, loader, n=None):
        out = []
        for i, (x,) in enumerate(loader):
            out.append(x.flatten().tolist())
            if n is not None and i + 1 == n:
                break
        return out

    def test_a_loaded_state_goes_on_with_the_next_batch(self):
        whole = self.loader()
        epoch0, epoch1 = self.batches(whole), self.batches(whole)
        self.assertEqual(len(epoch0), 10)
        self.assertNotEqual(epoch0, epoch1, "every epoch has its own order")
        first = self.loader()
        self.assertEqual(self.batches(first, 3), epoch0[:3])
        resumed = self.loader()
        resumed.load_state_dict(first.state_dict())
        self.assertEqual(self.batches(resumed), epoch0[3:])
        self.assertEqual(self.batches(resumed), epoch1, "then the next epoch")

    def test_workers_loading_ahead_do_not_move_the_position(self):
        from spotvisor_helper.lightning import ResumableDataLoader
        whole = self.batches(self.loader())
        first = ResumableDataLoader(self.data, 4, seed=3, num_workers=2)
        self.assertEqual(self.batches(first, 3), whole[:3])  # the workers have loaded more by now
        self.assertEqual(first.state_dict()["offset"], 3)
        resumed = ResumableDataLoader(self.data, 4, seed=3, num_workers=2)
        resumed.load_state_dict(first.state_dict())
        self.assertEqual(self.batches(resumed), whole[3:])

    def test_set_epoch_keeps_the_position_of_the_same_epoch(self):
        first = self.loader()
        self.batches(first, 4)
        resumed = self.loader()
        resumed.load_state_dict(first.state_dict())
        resumed.batch_sampler.set_epoch(0)  # Lightning does this at the start of a resumed epoch
        self.assertEqual(len(self.batches(resumed)), 6)
        resumed.batch_sampler.set_epoch(5)
        self.assertEqual(len(self.batches(resumed)), 10)

    def test_another_batch_size_is_refused(self):
        from spotvisor_helper.lightning import ResumableDataLoader
        other = ResumableDataLoader(self.data, 5, seed=3)
        with self.assertRaisesRegex(ValueError, "batch_size"):
            other.load_state_dict(self.loader().state_dict())

    def test_a_request_saves_a_checkpoint_and_a_stop_ends_fit(self):
        import lightning as L
        import torch
        from spotvisor_helper import SignalFlags
        from spotvisor_helper.lightning import ResumableDataLoader, SpotvisorCallback

        data = self.data

        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(1, 1)

            def training_step(self, batch, batch_idx):
                if self.global_step == 3:
                    callback.signals.request_checkpoint()
                if self.global_step == 6:
                    callback.signals.request_stop()
                return self.layer(batch[0]).pow(2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

            def train_dataloader(self):
                return ResumableDataLoader(data, 4, seed=3)

        with tempfile.TemporaryDirectory() as tmp:
            callback = SpotvisorCallback(tmp, signals=SignalFlags(install=False))
            trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=100, logger=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                enable_checkpointing=False, callbacks=[callback])
            trainer.fit(Model())
            self.assertEqual(trainer.global_step, 7, "fit() returned after the stop's step")
            self.assertEqual(sorted(os.listdir(tmp)), ["epoch=0-step=4.ckpt", "epoch=0-step=7.ckpt"])
            self.assertFalse(callback.signals.checkpoint_requested, "cleared by the save")
            self.assertTrue(callback.signals.stop_requested, "a stop stays set")
            saved = torch.load(Path(tmp) / "epoch=0-step=7.ckpt", weights_only=False)
            self.assertEqual(saved["global_step"], 7)
            loader_state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
            self.assertEqual(json.loads(json.dumps(loader_state))[0]["offset"], 7)


if __name__ == "__main__":
    unittest.main()
