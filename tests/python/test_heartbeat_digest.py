import os
import tempfile
import unittest
from pathlib import Path

import harness
from spotvisor_helper import Heartbeat, state_digest


class HeartbeatTest(unittest.TestCase):
    def test_beat_creates_and_touches(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sub" / "heartbeat"
            hb = Heartbeat(path)
            self.assertTrue(hb.beat())
            self.assertTrue(path.exists())
            os.utime(path, (1000, 1000))
            self.assertTrue(hb.beat())
            self.assertGreater(path.stat().st_mtime, 1000)

    def test_throttle_and_disabled(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "hb"
            hb = Heartbeat(path, min_interval=3600)
            self.assertTrue(hb.beat())
            os.utime(path, (1000, 1000))
            self.assertFalse(hb.beat())
            self.assertEqual(path.stat().st_mtime, 1000)
        self.assertFalse(Heartbeat(None).beat())


class DigestTest(unittest.TestCase):
    def test_plain_values(self):
        a = state_digest({"w": [1.0, 2.5], "b": 0.5})
        self.assertEqual(a, state_digest({"b": 0.5, "w": [1.0, 2.5]}))   # order-independent
        self.assertNotEqual(a, state_digest({"w": [1.0, 2.5000000000000004], "b": 0.5}))
        self.assertNotEqual(a, state_digest({"w": [1.0, 2.5], "c": 0.5}))
        self.assertRegex(a, r"^[0-9a-f]{64}$")
        with self.assertRaises(TypeError):
            state_digest({"x": object()})

    @unittest.skipUnless(harness.HAS_TORCH, "torch is not installed")
    def test_tensors_bit_exact(self):
        import torch
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        base = state_digest({"t": t})
        self.assertEqual(base, state_digest({"t": t.clone()}))
        self.assertNotEqual(base, state_digest({"t": t.reshape(3, 2)}))        # shape counts
        self.assertNotEqual(base, state_digest({"t": t.double()}))              # dtype counts
        u = t.clone()
        u.view(-1)[4] = torch.nextafter(u.view(-1)[4], torch.tensor(100.0))
        self.assertNotEqual(base, state_digest({"t": u}))                       # one ulp counts
        self.assertEqual(len(state_digest({"b": t.bfloat16()})), 64)


if __name__ == "__main__":
    unittest.main()
