import json
import random
import unittest

import harness
from spotvisor_helper import capture_rng_state, restore_rng_state


class RngRoundTripTest(unittest.TestCase):
    def draws(self):
        out = {"python": [random.random() for _ in range(5)]}
        if harness.HAS_NUMPY:
            import numpy as np
            out["numpy"] = np.random.standard_normal(5).tolist()
        if harness.HAS_TORCH:
            import torch
            out["torch"] = torch.rand(5).tolist()
            if torch.cuda.is_available():
                out["cuda"] = torch.rand(5, device="cuda").tolist()
        return out

    def test_round_trip_of_every_generator_in_use(self):
        if harness.HAS_NUMPY:
            import numpy  # noqa: F401  (captured only when imported)
        if harness.HAS_TORCH:
            import torch  # noqa: F401
        random.seed(1)
        state = capture_rng_state()
        if harness.HAS_NUMPY:
            self.assertIn("numpy", state)
        if harness.HAS_TORCH:
            self.assertIn("torch", state)
        first = self.draws()
        self.draws()                       # move every generator on
        restore_rng_state(state)
        self.assertEqual(self.draws(), first)

    def test_each_generator_matters(self):
        """A restore that skipped any generator would be caught: draws differ."""
        state = capture_rng_state()
        first = self.draws()
        for name in first:
            with self.subTest(generator=name):
                partial = {k: v for k, v in state.items() if k != name}
                restore_rng_state(partial)
                again = self.draws()
                self.assertNotEqual(again[name], first[name])

    def test_python_state_survives_json_style_lists(self):
        random.seed(3)
        state = capture_rng_state()
        want = [random.random() for _ in range(3)]
        as_lists = {"python": json.loads(json.dumps(state["python"]))}
        restore_rng_state(as_lists)
        self.assertEqual([random.random() for _ in range(3)], want)


if __name__ == "__main__":
    unittest.main()
