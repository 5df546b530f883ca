import unittest

import harness  # noqa: F401  (puts the helper on sys.path)
from spotvisor_helper import NamePattern, is_temp_name


class NamePatternTest(unittest.TestCase):
    def test_formats_and_matches_the_whole_name(self):
        p = NamePattern("ckpt_step{step}")
        self.assertEqual(p.format(20), "ckpt_step20")
        self.assertEqual(p.match("ckpt_step20"), 20)
        self.assertEqual(p.match("ckpt_step0007"), 7)          # leading zeros allowed
        self.assertIsNone(p.match("ckpt_step"))                # no digits
        self.assertIsNone(p.match("ckpt_step20x"))             # trailing junk
        self.assertIsNone(p.match("xckpt_step20"))             # leading junk
        self.assertIsNone(p.match("ckpt_step-1"))

    def test_suffix_patterns(self):
        p = NamePattern("step_{step}.pt")
        self.assertEqual(p.match("step_12.pt"), 12)
        self.assertIsNone(p.match("step_12.pt.tmp"))
        self.assertIsNone(p.match("step_.pt"))

    def test_a_star_is_any_run_of_characters_as_in_spotvisor(self):
        lightning = NamePattern("epoch=*-step={step}.ckpt")
        self.assertEqual(lightning.match("epoch=3-step=1200.ckpt"), 1200)
        self.assertEqual(lightning.match("epoch=-step=7.ckpt"), 7)
        self.assertIsNone(lightning.match("epoch=3-step=1200.ckpt.tmp"))
        self.assertIsNone(lightning.match("epoch=3-step=12x.ckpt"))
        self.assertIsNone(lightning.match("last.ckpt"))
        self.assertEqual(NamePattern("run-{step}-*").match("run-40-2026-12-03"), 40)
        self.assertIsNone(NamePattern("run-{step}-*").match("run-40"))
        self.assertEqual(NamePattern("*{step}").match("a12"), 12)
        self.assertEqual(NamePattern("*-{step}").match("x-1-2"), 2)
        self.assertIsNone(NamePattern("*-{step}").match("x-1-b"))
        self.assertEqual(NamePattern("*_{step}_*").match("gpt_300_final"), 300)
        with self.assertRaises(ValueError) as cm:
            lightning.format(5)  # a pattern with '*' names no one file
        self.assertIn("epoch=*-step={step}.ckpt", str(cm.exception))

    def test_pad(self):
        p = NamePattern("checkpoint-{step}", pad=6)
        self.assertEqual(p.format(42), "checkpoint-000042")
        self.assertEqual(p.match("checkpoint-42"), 42)

    def test_temp_names_never_match(self):
        p = NamePattern("{step}")
        self.assertEqual(p.match("100"), 100)
        for name in (".tmp-100-123", "tmp-100", "100.tmp", "100.orbax-checkpoint-tmp-5",
                     "100.partial", "100.incomplete", ".spotvisor-quarantine"):
            self.assertTrue(is_temp_name(name), name)
            self.assertIsNone(p.match(name), name)
        self.assertFalse(is_temp_name("ckpt_step10"))

    def test_bad_patterns_are_rejected_with_the_pattern_named(self):
        for bad in ("ckpt", "a{step}{step}", "dir/{step}"):
            with self.assertRaises(ValueError) as cm:
                NamePattern(bad)
            self.assertIn(repr(bad), str(cm.exception))
        with self.assertRaises(ValueError):
            NamePattern("tmp-{step}").format(1)     # would yield a temp name


if __name__ == "__main__":
    unittest.main()
