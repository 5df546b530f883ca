"""The S3 fixture's own test (tests/e2e/s3_server.py): moto's server answers rclone's S3
backend (an upload, a listing and a download, byte for byte), and its faults work: every
request fails while fail_with(503) is on and works again after stop_failing(); a paused
server stalls a request that completes once it is resumed.

Run (from the repository root):
  SPOTVISOR_S3_PYTHON="$(scripts/layered-env.sh s3-env | tail -n 1)" \\
    /usr/bin/python3 -m unittest -v tests.e2e.test_s3_server
Without SPOTVISOR_S3_PYTHON it fails (it does not skip): ctest runs it only when it is set.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from .s3_server import SLOW, S3Server

# One try per request, so that a failure comes at once rather than after rclone's retries.
NO_RETRIES = ("--low-level-retries", "1", "--retries", "1")


class S3ServerFixture(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"spotvisor-s3-{self._testMethodName}-"))
        self.addCleanup(self._cleanup)
        self.s3 = S3Server(str(self.dir / "server"))
        self.s3.__enter__()
        self.addCleanup(self.s3.__exit__, None, None, None)

    def _cleanup(self) -> None:
        outcome = getattr(self, "_outcome", None)
        failed = outcome is None or not getattr(outcome, "success", True)
        if failed or os.environ.get("SPOTVISOR_E2E_KEEP") == "1":
            print(f"\n[e2e] {self.id()}: kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def upload(self, name: str, size: int) -> bytes:
        data = os.urandom(size)
        local = self.dir / name.replace("/", "_")
        local.write_bytes(data)
        self.s3.rclone("copyto", str(local), f"{self.s3.remote}/{name}")
        return data

    def test_upload_list_download(self) -> None:
        self.assertEqual(self.s3.list_files(), {})
        data = self.upload("run1/checkpoint-10/model.bin", 5 * 1024 * 1024)
        self.upload("run1/checkpoint-10/state.json", 100)
        self.assertEqual(self.s3.list_files("run1"), {"run1/checkpoint-10/model.bin": 5 * 1024 * 1024,
                                                      "run1/checkpoint-10/state.json": 100})
        self.assertEqual(self.s3.list_files("run1/checkpoint-10"), self.s3.list_files())
        self.assertEqual(self.s3.list_files("nothing-here"), {})
        back = self.dir / "back.bin"
        self.s3.rclone("copyto", f"{self.s3.remote}/run1/checkpoint-10/model.bin", str(back))
        self.assertTrue(back.read_bytes() == data, "the object read back differs from the one uploaded")
        # The server's MD5 (its ETag, which rclone checks after each upload) is the data's.
        md5 = self.s3.rclone("md5sum", f"{self.s3.remote}/run1/checkpoint-10/model.bin").stdout.split()[0]
        self.assertEqual(md5, hashlib.md5(data).hexdigest())

    def test_fail_with_and_stop_failing(self) -> None:
        self.upload("a.bin", 1000)
        self.assertEqual(self.s3.rclone("lsf", self.s3.remote, *NO_RETRIES).stdout, "a.bin\n")
        self.s3.fail_with(503)
        try:
            failed = self.s3.rclone("lsf", self.s3.remote, *NO_RETRIES, check=False)
            self.assertNotEqual(failed.returncode, 0, f"rclone lsf succeeded against a failing server: {failed}")
            self.assertIn("503", failed.stderr)
            local = self.dir / "b.bin"
            local.write_bytes(os.urandom(300_000))
            # Straight to the object's PUT (no HEAD of it, no bucket check first), whose body the
            # server reads before answering, so that rclone sees the 503, not a reset connection.
            upload = self.s3.rclone("copyto", str(local), f"{self.s3.remote}/b.bin", "--no-check-dest",
                                    "--s3-no-check-bucket", *NO_RETRIES, check=False)
            self.assertNotEqual(upload.returncode, 0, f"an upload succeeded against a failing server: {upload}")
            self.assertIn("503", upload.stderr)
        finally:
            self.s3.stop_failing()
        # The data from before the faults is still there; the failed upload left nothing.
        self.assertEqual(self.s3.rclone("lsf", self.s3.remote, *NO_RETRIES).stdout, "a.bin\n")
        self.assertEqual(self.s3.list_files(), {"a.bin": 1000})

    def test_pause_resume(self) -> None:
        self.upload("a.bin", 1000)
        self.s3.pause()
        try:
            env = self.s3.rclone_env()
            lsf = subprocess.Popen(["rclone", "lsf", self.s3.remote, "-q"], env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                # Stalled: no answer comes while the server is stopped (rclone's own timeouts
                # are minutes long).
                time.sleep(1.5)
                self.assertIsNone(lsf.poll(), "rclone lsf finished against a paused server")
            finally:
                self.s3.resume()
            out, err = lsf.communicate(timeout=60 * SLOW)
        finally:
            if self.s3.paused:
                self.s3.resume()
        self.assertEqual((lsf.returncode, out), (0, "a.bin\n"), err)


if __name__ == "__main__":
    unittest.main()
