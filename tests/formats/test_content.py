"""The content check (checkpoints.content: finite) against checkpoints the real libraries
write: a real torch model whose weights are finite except one NaN (or ±Inf) in one layer, as
torch.save, DCP from two gloo processes, safetensors, and a sharded save_pretrained set.
`spotvisor validate --content finite` must say bad and name the file, that layer (as the
format names it: pickle path, DCP FQN, safetensors name) and the first bad element; the same
checkpoint without the content check is good (its bytes are intact); the finite original is
good with it. Then under `spotvisor run`: a NaN newest checkpoint is quarantined and the
trainer resumes from the previous good one.

Runs under Debian's torch 1.13 and torch 2.x like test_formats.py; what a version cannot
write is skipped with the reason writers.available() gives (torch 2.x must have them all).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import writers  # noqa: E402  (imports torch)

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("SPOTVISOR_BINARY", str(ROOT / "build" / "spotvisor"))
REQUIRE_TORCH2 = os.environ.get("SPOTVISOR_FORMATS_REQUIRE_TORCH2") == "1"
BAD_ROW, BAD_COL = 3, 5  # where the NaN goes in the poisoned layer's weight


def validate(path, *extra):
    out = subprocess.run([BINARY, "validate", "--level", "full", *extra, str(path)], capture_output=True, text=True,
                         timeout=120)
    return out.returncode, out.stdout + out.stderr


def poisoned(model, layer="2.weight", value=float("nan")):
    """A copy of the model's state where one element of one layer is `value`."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state[layer][BAD_ROW, BAD_COL] = value
    return state


class ContentCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if REQUIRE_TORCH2 and not writers.TORCH2:
            raise AssertionError(f"torch 2.x required, found {torch.__version__} at {sys.executable}")
        if not os.access(BINARY, os.X_OK):
            raise AssertionError(f"no spotvisor binary at {BINARY} (set SPOTVISOR_BINARY)")

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="spotvisor-content-")
        self.dir = Path(self._tmp.name)
        self.addCleanup(self._tmp.cleanup)
        self.model = writers.tiny_model(seed=3)
        self.element = BAD_ROW * self.model.state_dict()["2.weight"].shape[1] + BAD_COL

    def need(self, writer):
        why = writers.available()[writer]
        if why:
            if REQUIRE_TORCH2:
                self.fail(why)
            self.skipTest(why)

    def assert_named(self, path, layer, what="NaN"):
        rc, out = validate(path, "--content", "finite")
        self.assertEqual(rc, 1, out)
        self.assertIn(f"tensor '{layer}' (float32", out)
        self.assertIn(f"holds {what} at element {self.element} ", out)
        self.assertIn("checkpoints.content: finite", out)
        rc, plain = validate(path)  # the bytes are intact: only the content check refuses it
        self.assertEqual(rc, 0, plain)
        return out


class TorchSave(ContentCase):
    def test_nan_in_one_layer_of_a_training_state_is_named(self):
        good = self.dir / "good.pt"
        writers.write_torch_save(writers.training_state(self.model), good)
        rc, out = validate(good, "--content", "finite")
        self.assertEqual(rc, 0, out)
        bad = self.dir / "bad.pt"
        state = writers.training_state(self.model)
        state["model"] = poisoned(self.model)
        writers.write_torch_save(state, bad)
        out = self.assert_named(bad, "model.2.weight")
        self.assertIn(str(bad), out)

    def test_inf_in_a_parameter_and_in_half_and_bfloat16(self):
        path = self.dir / "inf.pt"
        params = {k: torch.nn.Parameter(v) for k, v in poisoned(self.model, value=float("-inf")).items()}
        writers.write_torch_save(params, path)
        self.assert_named(path, "2.weight", "-Inf")
        for dtype, name in [(torch.float16, "float16"), (torch.bfloat16, "bfloat16")]:
            path = self.dir / f"{name}.pt"
            state = {k: v.to(dtype) for k, v in poisoned(self.model, value=float("inf")).items()}
            writers.write_torch_save({"model": state}, path)
            rc, out = validate(path, "--content", "finite")
            self.assertEqual(rc, 1, out)
            self.assertIn(f"tensor 'model.2.weight' ({name}", out)
            self.assertIn(f"holds +Inf at element {self.element} ", out)

    def test_integer_tensors_and_views_are_handled(self):
        # int64 tensors (a step counter, token ids) are never judged; a view into a storage
        # names its own first element.
        path = self.dir / "view.pt"
        base = torch.zeros(10)
        base[7] = float("nan")
        writers.write_torch_save({"ids": torch.full((4,), -1, dtype=torch.int64), "tail": base[5:]}, path)
        rc, out = validate(path, "--content", "finite")
        self.assertEqual(rc, 1, out)
        self.assertIn("tensor 'tail' (float32", out)
        self.assertIn("holds NaN at element 2 ", out)


class Dcp(ContentCase):
    def test_nan_in_one_item_names_its_fqn(self):
        good, bad = self.dir / "good", self.dir / "bad"
        writers.write_dcp({"model": writers.flat_tensors(self.model)}, good)
        rc, out = validate(good, "--content", "finite")
        self.assertEqual(rc, 0, out)
        writers.write_dcp({"model": poisoned(self.model)}, bad)
        rc, out = validate(bad, "--content", "finite")
        self.assertEqual(rc, 1, out)
        self.assertIn("tensor 'model.2.weight' (float32", out)
        self.assertIn(".distcp", out)  # the shard holding it
        self.assertEqual(validate(bad)[0], 0)


class Safetensors(ContentCase):
    def test_nan_in_one_tensor_is_named(self):
        self.need("safetensors")
        good, bad = self.dir / "good.safetensors", self.dir / "bad.safetensors"
        writers.write_safetensors(writers.flat_tensors(self.model), good)
        self.assertEqual(validate(good, "--content", "finite")[0], 0)
        writers.write_safetensors(poisoned(self.model), bad)
        self.assert_named(bad, "2.weight")

    def test_sharded_save_pretrained_names_the_shard_and_weight(self):
        self.need("safetensors_sharded")
        model = writers.tiny_transformers_model(seed=1)
        name, weight = next((k, v) for k, v in model.state_dict().items() if v.dim() == 2 and v.shape[0] > BAD_ROW)
        with torch.no_grad():
            weight[BAD_ROW, BAD_COL] = float("nan")
        out_dir = self.dir / "pretrained"
        shards = writers.write_pretrained(model, out_dir)
        self.assertGreater(len(shards), 1, shards)
        rc, out = validate(out_dir, "--content", "finite")
        self.assertEqual(rc, 1, out)
        index = json.loads((out_dir / "model.safetensors.index.json").read_text())
        self.assertIn(f"{out_dir / index['weight_map'][name]}: tensor '{name}'", out)
        self.assertIn(f"holds NaN at element {BAD_ROW * weight.shape[1] + BAD_COL} ", out)


class UnderRun(ContentCase):
    def test_a_nan_newest_checkpoint_is_quarantined_and_the_previous_one_resumed(self):
        ckpt = self.dir / "ckpt"
        ckpt.mkdir()
        writers.write_torch_save({"model": writers.flat_tensors(self.model)}, ckpt / "step_100.pt")
        writers.write_torch_save({"model": poisoned(self.model)}, ckpt / "step_200.pt")
        job = self.dir / "job.yaml"
        seen = self.dir / "resumed_from"
        # The trainer records what it was resumed from, and succeeds.
        command = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[3])", str(seen)]
        job.write_text(json.dumps({
            "job": {"name": "content", "command": command, "resume_args": ["--resume", "{checkpoint}"]},
            "provider": {"kind": "none"},
            "checkpoints": {"dir": str(ckpt), "pattern": "step_{step}.pt", "content": "finite"},
            "telemetry": {"state_dir": str(self.dir / "state")},
        }))
        out = subprocess.run([BINARY, "run", "--config", str(job)], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(seen.read_text(), str(ckpt / "step_100.pt"))
        self.assertTrue((ckpt / ".spotvisor-quarantine").is_dir(), out.stderr)
        self.assertFalse((ckpt / "step_200.pt").exists())
        log = out.stdout + out.stderr
        self.assertIn("model.2.weight", log)
        self.assertIn("NaN", log)
        # `spotvisor checkpoints` with the same job lists only the good one now; the job file
        # without the content check would have resumed from step 200.
        listed = subprocess.run([BINARY, "checkpoints", "--config", str(job), "--json"], capture_output=True,
                                text=True, timeout=60)
        self.assertEqual([Path(r["path"]).name for r in json.loads(listed.stdout)], ["step_100.pt"], listed.stdout)


if __name__ == "__main__":
    unittest.main()
