"""The C++ validator and the helper agree on the manifest, both ways.

Runs only where a built `spotvisor` binary exists: $SPOTVISOR_BINARY, else
<repo>/build/spotvisor (the default build directory)."""

import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import harness
from spotvisor_helper import Checkpointer, ManifestError, verify_manifest


SPOTVISOR = harness.find_spotvisor()


class Counter:
    def __init__(self):
        self.value = 3

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


@unittest.skipIf(SPOTVISOR is None, "no built spotvisor binary (set SPOTVISOR_BINARY)")
class CrossValidateTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def validate(self, *paths):
        return subprocess.run([str(SPOTVISOR), "validate", *map(str, paths)],
                              capture_output=True, text=True, timeout=60)

    def test_spotvisor_accepts_helper_checkpoints_and_catches_a_flip(self):
        ckpt = Checkpointer(self.root / "ckpt", format="pickle").track(c=Counter())
        good = ckpt.save(1, extra={"blob": "q" * 10000})
        result = self.validate(good)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        bad = self.root / "ckpt" / "ckpt_step2"
        shutil.copytree(good, bad)
        data = bytearray((bad / "state.pkl").read_bytes())
        data[5000] ^= 0x04
        (bad / "state.pkl").write_bytes(bytes(data))
        result = self.validate(bad)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        with self.assertRaises(ManifestError):
            verify_manifest(bad)

    @unittest.skipUnless(harness.HAS_TORCH, "torch is not installed")
    def test_spotvisor_accepts_torch_checkpoints_of_the_helper(self):
        code = ("import torch, spotvisor_helper as h; "
                f"h.Checkpointer({str(self.root / 'ckpt')!r}).track(m=torch.nn.Linear(3, 2)).save(5)")
        subprocess.run([sys.executable, "-c", code], env=harness.child_env(), check=True, timeout=60)
        result = self.validate(self.root / "ckpt" / "ckpt_step5")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_helper_reads_manifests_written_by_spotvisor_seal(self):
        target = self.root / "sealed"
        (target / "sub").mkdir(parents=True)
        (target / "a.dat").write_bytes(b"abc")   # no known format: the manifest is its check
        (target / "sub" / "b.dat").write_bytes(b"defg")
        subprocess.run([str(SPOTVISOR), "seal", str(target)], check=True, capture_output=True, timeout=60)
        manifest = verify_manifest(target)
        self.assertEqual(manifest.algorithm, "xxh3-128")
        self.assertEqual([(f.path, f.size) for f in manifest.files], [("a.dat", 3), ("sub/b.dat", 4)])


if __name__ == "__main__":
    unittest.main()
