"""The commit protocol under crashes and failed fsyncs.

A child process saves a checkpoint and is killed (os._exit) right before its K-th fsync or
rename, for every K the protocol has: whatever moment it dies, no directory with the final
name may exist unless it is complete and verifies, and the next save cleans up.
"""

import errno
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from unittest import mock

import harness
from spotvisor_helper import (
    CheckpointError,
    Checkpointer,
    atomic_checkpoint_dir,
    atomic_write_text,
    verify_manifest,
)
from spotvisor_helper.atomic import TEMP_PREFIX

CHILD = textwrap.dedent(r"""
    import os, sys
    crash_at = int(sys.argv[2])
    calls = {"n": 0}
    def counted(real):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == crash_at:
                os._exit(17)          # the machine dies before this operation happens
            return real(*args, **kwargs)
        return wrapper
    os.fsync = counted(os.fsync)
    os.rename = counted(os.rename)
    os.replace = counted(os.replace)
    import spotvisor_helper as h
    ckpt = h.Checkpointer(sys.argv[1], pattern="ckpt_step{step}", format="pickle")
    ckpt.track(rng=__import__("random").Random(5))
    ckpt.save(int(sys.argv[3]), extra={"blob": "y" * 100000})
    print("OPS", calls["n"])
""")


class CrashDuringSaveTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)
        self.script = self.root / "child.py"
        self.script.write_text(CHILD)
        self.ckpt_dir = self.root / "ckpt"
        self.ckpt_dir.mkdir()     # so every run performs the same operations

    def tearDown(self):
        self._tmp.cleanup()

    def run_child(self, crash_at: int, step: int = 7) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(self.script), str(self.ckpt_dir), str(crash_at), str(step)],
            env=harness.child_env(), capture_output=True, text=True, timeout=60)

    def count_ops(self, step: int) -> int:
        """fsync + rename calls of one clean save of `step` (undone afterwards)."""
        before = {p.name for p in self.ckpt_dir.iterdir()}
        done = self.run_child(0, step=step)
        self.assertEqual(done.returncode, 0, done.stderr)
        for entry in self.ckpt_dir.iterdir():
            if entry.name not in before:
                harness_rmtree(entry)
        return int(done.stdout.split("OPS")[1])

    def assert_no_partial_final(self, final: Path, context: str):
        if final.exists():
            verify_manifest(final)     # complete, or it must not carry the final name
        for entry in self.ckpt_dir.iterdir():
            self.assertTrue(entry == final or entry.name.startswith(TEMP_PREFIX),
                            f"{context}: unexpected entry {entry.name}")

    def test_crash_before_every_fsync_and_rename(self):
        total = self.count_ops(7)
        self.assertGreaterEqual(total, 5)   # files, manifest, temp dir, rename, parent
        final = self.ckpt_dir / "ckpt_step7"
        appeared_at = None
        for k in range(1, total + 1):
            with self.subTest(crash_before_op=k):
                for entry in self.ckpt_dir.iterdir():
                    harness_rmtree(entry)
                result = self.run_child(k)
                self.assertEqual(result.returncode, 17, result.stderr)
                self.assert_no_partial_final(final, f"crash before op {k}")
                if final.exists() and appeared_at is None:
                    appeared_at = k
        # The final name appears only once the rename itself has run: after the crash
        # before the parent-directory fsync, i.e. the last operation.
        self.assertEqual(appeared_at, total)
        # A later save (another process) removes the dead writer's leftovers and works.
        result = self.run_child(0, step=8)
        self.assertEqual(result.returncode, 0, result.stderr)
        names = sorted(p.name for p in self.ckpt_dir.iterdir())
        self.assertEqual(names, ["ckpt_step7", "ckpt_step8"])

    def test_crash_while_replacing_the_same_step_never_leaves_a_partial_dir(self):
        self.assertEqual(self.run_child(0).returncode, 0)
        total = self.count_ops(7)
        final = self.ckpt_dir / "ckpt_step7"
        recovered = 0
        for k in range(1, total + 3):
            with self.subTest(crash_before_op=k):
                result = self.run_child(k)
                self.assertIn(result.returncode, (0, 17), result.stderr)
                self.assert_no_partial_final(final, f"replace, crash before op {k}")
                if not final.exists():
                    # Died between moving the old copy aside and renaming the new one
                    # in: the next save (of another step) puts the old copy back.
                    self.assertEqual(self.run_child(0, step=8).returncode, 0)
                    verify_manifest(final)
                    self.assertEqual(sorted(p.name for p in self.ckpt_dir.iterdir()),
                                     ["ckpt_step7", "ckpt_step8"])
                    harness_rmtree(self.ckpt_dir / "ckpt_step8")
                    recovered += 1
        self.assertEqual(recovered, 1)      # exactly one crash point falls in that window


def harness_rmtree(path: Path) -> None:
    import shutil
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


class FailedFsyncTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def test_failed_fsync_fails_the_save_and_leaves_nothing(self):
        ckpt = Checkpointer(self.root / "ckpt", format="pickle")
        with mock.patch("os.fsync", side_effect=OSError(errno.EIO, "Input/output error")):
            with self.assertRaises(CheckpointError) as cm:
                ckpt.save(3)
        message = str(cm.exception)
        self.assertIn(str(self.root / "ckpt" / "ckpt_step3"), message)
        self.assertIn("fsync failed", message)
        self.assertEqual(list((self.root / "ckpt").iterdir()), [])
        self.assertIsNone(ckpt.last_saved_step)

    def test_exception_inside_the_block_removes_the_temp_dir(self):
        final = self.root / "c" / "ckpt_step1"
        with self.assertRaises(RuntimeError):
            with atomic_checkpoint_dir(final) as tmp:
                (tmp / "half.bin").write_bytes(b"half")
                raise RuntimeError("serializer died")
        self.assertFalse(final.exists())
        self.assertEqual(list(final.parent.iterdir()), [])

    def test_marker_is_written_and_listed(self):
        final = self.root / "ckpt_step2"
        with atomic_checkpoint_dir(final, marker="COMMITTED") as tmp:
            (tmp / "a").write_bytes(b"a")
        self.assertEqual((final / "COMMITTED").read_bytes(), b"committed\n")
        self.assertIn("COMMITTED", [e.path for e in verify_manifest(final).files])

    def test_atomic_write_text_replaces_whole_file(self):
        target = self.root / "result.txt"
        atomic_write_text(target, "old\n")
        atomic_write_text(target, "new\n")
        self.assertEqual(target.read_text(), "new\n")
        self.assertEqual(sorted(p.name for p in self.root.iterdir()), ["result.txt"])
        with mock.patch("os.fsync", side_effect=OSError(errno.EIO, "Input/output error")):
            with self.assertRaises(OSError) as cm:
                atomic_write_text(target, "never\n")
        self.assertIn("result.txt", str(cm.exception))
        self.assertEqual(target.read_text(), "new\n")
        self.assertEqual(sorted(p.name for p in self.root.iterdir()), ["result.txt"])


if __name__ == "__main__":
    unittest.main()
