"""The manifest's `epoch` (fencing): the helper records $SPOTVISOR_EPOCH in every checkpoint
it commits, refuses a value that is not a non-negative integer before anything is written,
and reads the field back; without the variable the manifest is what it always was."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import harness
from spotvisor_helper import (EPOCH_ENV, MANIFEST_NAME, Checkpointer, ManifestError, atomic_checkpoint_dir,
                              read_manifest, verify_manifest)


class Counter:
    def __init__(self):
        self.value = 3

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


class ManifestEpochTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)
        self._env = mock.patch.dict(os.environ)
        self._env.start()
        os.environ.pop(EPOCH_ENV, None)

    def tearDown(self):
        self._env.stop()
        self._tmp.cleanup()

    def save(self, name="ckpt_step5"):
        with atomic_checkpoint_dir(self.root / name) as tmp:
            (tmp / "state.bin").write_bytes(b"x" * 100)
        return self.root / name

    def test_the_epoch_from_the_environment_is_written_and_read_back(self):
        os.environ[EPOCH_ENV] = "7"
        ckpt = self.save()
        doc = json.loads((ckpt / MANIFEST_NAME).read_text())
        self.assertEqual(list(doc), ["format", "version", "algorithm", "epoch", "files"])
        self.assertEqual(doc["epoch"], 7)
        self.assertIs(type(doc["epoch"]), int)
        self.assertEqual(read_manifest(ckpt).epoch, 7)
        self.assertEqual(verify_manifest(ckpt).epoch, 7)

    def test_the_checkpointer_writes_it_too(self):
        os.environ[EPOCH_ENV] = "0"
        saved = Checkpointer(self.root / "ckpt", format="pickle").track(c=Counter()).save(3)
        self.assertEqual(read_manifest(saved).epoch, 0)

    def test_without_the_variable_there_is_no_epoch(self):
        ckpt = self.save()
        self.assertNotIn("epoch", json.loads((ckpt / MANIFEST_NAME).read_text()))
        self.assertIsNone(read_manifest(ckpt).epoch)

    def test_garbage_is_refused_naming_the_variable_and_nothing_is_written(self):
        for garbage in ["", "-1", "3.0", "abc", " 4", "0x10", "٣"]:
            with self.subTest(value=garbage):
                os.environ[EPOCH_ENV] = garbage
                with self.assertRaises(ManifestError) as cm:
                    self.save()
                self.assertIn(EPOCH_ENV, str(cm.exception))
                self.assertIn(repr(garbage), str(cm.exception))
                self.assertIn("ckpt_step5", str(cm.exception))
                self.assertEqual(sorted(p.name for p in self.root.iterdir()), [])

    def test_a_bad_epoch_in_a_manifest_is_an_error_naming_it(self):
        ckpt = self.save()
        doc = json.loads((ckpt / MANIFEST_NAME).read_text())
        for bad in [-1, "3", 1.5, True, None]:
            with self.subTest(epoch=bad):
                doc["epoch"] = bad
                (ckpt / MANIFEST_NAME).write_text(json.dumps(doc))
                with self.assertRaises(ManifestError) as cm:
                    read_manifest(ckpt)
                self.assertIn(str(ckpt / MANIFEST_NAME), str(cm.exception))
                self.assertIn("'epoch'", str(cm.exception))

    def test_sealing_again_keeps_the_epoch(self):
        os.environ[EPOCH_ENV] = "12"
        ckpt = self.save()
        del os.environ[EPOCH_ENV]
        (ckpt / "more.bin").write_bytes(b"y")
        result = subprocess.run([sys.executable, "-m", "spotvisor_helper", "seal", str(ckpt)],
                                env=harness.child_env(), capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        manifest = verify_manifest(ckpt)
        self.assertEqual(manifest.epoch, 12)
        self.assertIn("more.bin", [f.path for f in manifest.files])


if __name__ == "__main__":
    unittest.main()
