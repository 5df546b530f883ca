import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import harness
from spotvisor_helper import Checkpointer, verify_manifest


def cli(*args):
    return subprocess.run([sys.executable, "-m", "spotvisor_helper", *map(str, args)],
                          env=harness.child_env(), capture_output=True, text=True, timeout=60)


class CliTest(unittest.TestCase):
    def test_verify_latest_seal(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            ckpt = Checkpointer(root / "ckpt", format="pickle")
            good, newest = ckpt.save(1), ckpt.save(2)
            (newest / "state.pkl").write_bytes(b"torn")
            result = cli("verify", good, newest)
            self.assertEqual(result.returncode, 1)
            self.assertIn(f"good  {good}", result.stdout)
            self.assertIn(f"bad   {newest}: 'state.pkl' is 4 bytes", result.stdout)
            result = cli("latest", "--dir", root / "ckpt", "--pattern", "ckpt_step{step}")
            self.assertEqual((result.returncode, result.stdout.strip()), (0, str(good)))
            result = cli("latest", "--dir", root / "empty")
            self.assertEqual(result.returncode, 1)
            self.assertIn("no verified checkpoint", result.stderr)
            result = cli("seal", newest)
            self.assertEqual(result.returncode, 0, result.stderr)
            verify_manifest(newest)
            self.assertEqual(cli("verify", newest).returncode, 0)


if __name__ == "__main__":
    unittest.main()
