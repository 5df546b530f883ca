import os
import random
import subprocess
import sys
import tempfile
import unittest
import warnings
from pathlib import Path
from unittest import mock

import harness
from spotvisor_helper import (
    RESUME_ENV,
    CheckpointError,
    Checkpointer,
    ManifestError,
    ResumableSampler,
    resolve_resume_path,
    verify_manifest,
)


class Counter:
    """A minimal stateful object, like a model without torch."""

    def __init__(self):
        self.value = 0

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


class CheckpointerTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name) / "ckpt"
        patcher = mock.patch.dict(os.environ, {}, clear=False)
        patcher.start()
        self.addCleanup(patcher.stop)
        for key in [k for k in os.environ if k.startswith("SPOTVISOR_")]:
            del os.environ[key]

    def tearDown(self):
        self._tmp.cleanup()

    def make(self, **kwargs):
        kwargs.setdefault("format", "pickle")
        return Checkpointer(self.dir, pattern="ckpt_step{step}", **kwargs)

    def test_round_trip_of_tracked_objects_rng_and_extra(self):
        counter, gen = Counter(), random.Random(3)
        sampler = ResumableSampler(100, seed=1, batch_size=10)
        ckpt = self.make().track(counter=counter, gen=gen, sampler=sampler)
        counter.value = 41
        it = iter(sampler)
        for _ in range(3):
            next(it)
        random.seed(99)
        path = ckpt.save(12, extra={"epoch": 0, "note": "hi"})
        self.assertEqual(path, self.dir / "ckpt_step12")
        verify_manifest(path)
        expect_gen = [gen.random() for _ in range(3)]
        expect_global = [random.random() for _ in range(3)]
        expect_batch = next(it)

        counter2, gen2 = Counter(), random.Random(0)
        sampler2 = ResumableSampler(100, seed=1, batch_size=10)
        ckpt2 = self.make().track(counter=counter2, gen=gen2, sampler=sampler2)
        random.seed(12345)
        loaded = ckpt2.resume(str(path))
        self.assertEqual((loaded.step, loaded.extra), (12, {"epoch": 0, "note": "hi"}))
        self.assertEqual(loaded.restored, ("counter", "gen", "sampler"))
        self.assertTrue(loaded.rng_restored)
        self.assertEqual(counter2.value, 41)
        self.assertEqual([gen2.random() for _ in range(3)], expect_gen)
        self.assertEqual([random.random() for _ in range(3)], expect_global)
        self.assertEqual(next(iter(sampler2)), expect_batch)
        self.assertEqual(ckpt2.last_saved_step, 12)

    def test_resume_path_from_argument_env_or_nothing(self):
        self.assertIsNone(resolve_resume_path(None))
        self.assertIsNone(self.make().resume(None))            # fresh start
        path = self.make().save(5)
        os.environ[RESUME_ENV] = str(path)
        self.assertEqual(resolve_resume_path(None), path)
        self.assertEqual(resolve_resume_path("/explicit"), Path("/explicit"))   # arg wins
        self.assertEqual(self.make().resume().step, 5)
        os.environ[RESUME_ENV] = ""
        self.assertIsNone(self.make().resume())

    def test_missing_or_corrupt_checkpoint_errors_name_it(self):
        with self.assertRaises(CheckpointError) as cm:
            self.make().resume(self.dir / "ckpt_step404")
        self.assertIn("ckpt_step404 does not exist", str(cm.exception))
        path = self.make().save(6, extra={"blob": "z" * 5000})
        state = path / "state.pkl"
        data = bytearray(state.read_bytes())
        data[len(data) // 2] ^= 0xFF
        state.write_bytes(bytes(data))
        with self.assertRaises(ManifestError) as cm:
            self.make().resume(path)
        self.assertIn(str(path), str(cm.exception))
        self.assertIn("state.pkl", str(cm.exception))

    def test_strict_resume_needs_every_tracked_object(self):
        path = self.make().track(a=Counter()).save(1)
        with self.assertRaises(CheckpointError) as cm:
            self.make().track(a=Counter(), b=Counter()).resume(path)
        self.assertIn("no state for 'b'", str(cm.exception))
        loaded = self.make().track(a=Counter(), b=Counter()).resume(path, strict=False)
        self.assertEqual(loaded.restored, ("a",))

    def test_exclude_and_restore_rng_false_leave_things_alone(self):
        sampler = ResumableSampler(50, seed=2, batch_size=5)
        ckpt = self.make().track(sampler=sampler)
        next(iter(sampler))
        random.seed(1)
        path = ckpt.save(1)
        fresh = ResumableSampler(50, seed=2, batch_size=5)
        random.seed(7)
        expected = random.getstate()
        loaded = self.make().track(sampler=fresh).resume(path, restore_rng=False, exclude=("sampler",))
        self.assertEqual((fresh.epoch, fresh.offset), (0, 0))
        self.assertEqual(random.getstate(), expected)
        self.assertFalse(loaded.rng_restored)
        with self.assertRaises(ValueError):
            self.make().track(sampler=fresh).resume(path, exclude=("nope",))

    def test_name_and_content_must_agree(self):
        path = self.make().save(3)
        os.rename(path, self.dir / "ckpt_step4")
        with self.assertRaises(CheckpointError) as cm:
            self.make().resume(self.dir / "ckpt_step4")
        self.assertIn("named for step 4 but holds step 3", str(cm.exception))

    def test_untrackable_object_is_rejected_by_name(self):
        with self.assertRaises(TypeError) as cm:
            self.make().track(weights=[1.0, 2.0])
        self.assertIn("'weights'", str(cm.exception))

    def test_retention_keeps_the_newest_n_and_never_the_just_saved_one(self):
        ckpt = self.make(keep=2)
        for step in (10, 20, 30, 40, 50):
            ckpt.save(step)
        self.assertEqual([s for s, _ in ckpt.checkpoints()], [40, 50])
        # After resuming from an older one, the one just saved stays even though two
        # newer ones exist.
        ckpt.save(45)
        self.assertEqual([s for s, _ in ckpt.checkpoints()], [45, 50])
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()),
                         ["ckpt_step45", "ckpt_step50"])     # nothing else left behind

    def test_keep_zero_keeps_everything(self):
        ckpt = self.make()
        for step in range(1, 6):
            ckpt.save(step)
        self.assertEqual(len(ckpt.checkpoints()), 5)

    def test_resave_of_the_same_step_replaces_it(self):
        counter = Counter()
        ckpt = self.make().track(c=counter)
        ckpt.save(9)
        counter.value = 2
        ckpt.save(9)
        fresh = Counter()
        self.make().track(c=fresh).resume(self.dir / "ckpt_step9")
        self.assertEqual(fresh.value, 2)
        self.assertEqual([p.name for p in self.dir.iterdir()], ["ckpt_step9"])

    def test_listing_ignores_temp_and_foreign_names_and_latest_skips_bad(self):
        ckpt = self.make()
        ckpt.save(1)
        ckpt.save(2)
        (self.dir / ".tmp-ckpt_step3-1").mkdir()
        (self.dir / "ckpt_step4.tmp").mkdir()
        (self.dir / "notes").mkdir()
        self.assertEqual([s for s, _ in ckpt.checkpoints()], [1, 2])
        (self.dir / "ckpt_step2" / "state.pkl").write_bytes(b"garbage")
        self.assertEqual(ckpt.latest(), self.dir / "ckpt_step1")
        self.assertEqual(ckpt.latest(verify=False), self.dir / "ckpt_step2")

    def test_stale_temp_dirs_of_dead_writers_are_removed(self):
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        dead_pid = int(dead.stdout)
        self.dir.mkdir(parents=True)
        stale = self.dir / f".tmp-ckpt_step5-{dead_pid}"
        stale_deleting = self.dir / f".tmp-deleting-ckpt_step1-{dead_pid}"
        alive = self.dir / f".tmp-ckpt_step6-{os.getppid()}"
        foreign = self.dir / f".tmp-otherthing-{dead_pid}"
        for d in (stale, stale_deleting, alive, foreign):
            d.mkdir()
            (d / "junk").write_bytes(b"x")
        self.make().save(7)
        self.assertFalse(stale.exists())
        self.assertFalse(stale_deleting.exists())
        self.assertTrue(alive.exists())      # a live writer's temp dir is never touched
        self.assertTrue(foreign.exists())    # not ours: not touched

    def test_checkpoint_dir_from_environment(self):
        os.environ["SPOTVISOR_CHECKPOINT_DIR"] = str(self.dir)
        self.assertEqual(Checkpointer().directory, self.dir)
        del os.environ["SPOTVISOR_CHECKPOINT_DIR"]
        with self.assertRaises(ValueError):
            Checkpointer()


@unittest.skipUnless(harness.HAS_TORCH, "torch is not installed")
class TorchCheckpointerTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def build(self):
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        # torch.amp.GradScaler from 2.3 on (torch.cuda.amp's warns from 2.4); 1.13 has only the old one.
        scaler = (torch.amp.GradScaler("cpu", enabled=False) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler(enabled=False))
        return model, opt, sched, scaler

    def train(self, model, opt, sched, steps):
        import torch
        for _ in range(steps):
            loss = model(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()

    def test_torch_state_resumes_bit_exactly(self):
        import torch
        model, opt, sched, scaler = self.build()
        ckpt = Checkpointer(self.dir, format="auto").track(model=model, optimizer=opt,
                                                          scheduler=sched, scaler=scaler)
        self.train(model, opt, sched, 3)
        path = ckpt.save(3)
        self.assertTrue((path / "state.pt").exists())   # torch.save ZIP, CRCs inside
        import zipfile
        self.assertIsNone(zipfile.ZipFile(path / "state.pt").testzip())
        self.train(model, opt, sched, 4)
        expected = {k: v.clone() for k, v in model.state_dict().items()}

        model2, opt2, sched2, scaler2 = self.build()
        torch.manual_seed(999)
        Checkpointer(self.dir).track(model=model2, optimizer=opt2, scheduler=sched2,
                                     scaler=scaler2).resume(path)
        self.assertEqual(sched2.last_epoch, 3)
        self.train(model2, opt2, sched2, 4)
        for key, value in model2.state_dict().items():
            self.assertTrue(torch.equal(value, expected[key]), key)

    @unittest.skipUnless(harness.HAS_NUMPY, "NumPy is not installed")
    def test_state_pt_loads_with_weights_only_and_resumes_numpy_generators(self):
        # torch.load reads weights_only=True by default since torch 2.6: a trainer or tool
        # that loads state.pt plainly must not meet a pickled NumPy array (the RNG states).
        import numpy as np
        import torch
        model, opt, sched, scaler = self.build()
        self.train(model, opt, sched, 2)
        legacy, mt = np.random.RandomState(2), np.random.Generator(np.random.MT19937(3))
        np.random.seed(1)
        path = Checkpointer(self.dir).track(model=model, optimizer=opt, scheduler=sched, scaler=scaler,
                                            legacy=legacy, mt=mt).save(2)
        want = (np.random.rand(3).tolist(), legacy.rand(3).tolist(), mt.random(3).tolist())
        if int(torch.__version__.split(".")[0]) >= 2:
            # Not on 1.13: its first weights_only unpickler refuses every float (BINFLOAT),
            # so no optimizer state loads with it; 1.13 loads with weights_only=False by default.
            state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
            self.assertEqual(state["step"], 2)
            self.assertIn("numpy", state["rng"][0])
        legacy2, mt2 = np.random.RandomState(0), np.random.Generator(np.random.MT19937(0))
        Checkpointer(self.dir).track(legacy=legacy2, mt=mt2).resume(path)
        self.assertEqual((np.random.rand(3).tolist(), legacy2.rand(3).tolist(), mt2.random(3).tolist()), want)

    def test_corrupt_state_pt_is_refused_with_its_name(self):
        import torch
        path = Checkpointer(self.dir).track(m=torch.nn.Linear(64, 64)).save(2)
        state = path / "state.pt"
        data = bytearray(state.read_bytes())
        data[len(data) // 2] ^= 0x10       # inside the tensor bytes: torch.load would not notice
        state.write_bytes(bytes(data))
        with self.assertRaises(ManifestError) as cm:
            Checkpointer(self.dir).track(m=torch.nn.Linear(64, 64)).resume(path)
        self.assertIn(f"{path}: 'state.pt' has CRC-32", str(cm.exception))

    def test_generators_can_be_tracked(self):
        import torch
        g = torch.Generator().manual_seed(5)
        ckpt = Checkpointer(self.dir).track(g=g)
        path = ckpt.save(1)
        want = torch.rand(3, generator=g)
        g2 = torch.Generator().manual_seed(77)
        Checkpointer(self.dir).track(g=g2).resume(path)
        self.assertTrue(torch.equal(torch.rand(3, generator=g2), want))

    def test_cuda_state_from_another_machine_warns(self):
        import torch
        path = Checkpointer(self.dir).save(1)
        state = torch.load(path / "state.pt")
        state["rng"][0]["cuda"] = [torch.zeros(8, dtype=torch.uint8)] * 3
        (path / "state.pt").unlink()
        torch.save(state, path / "state.pt")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Checkpointer(self.dir, verify=False).resume(path)
        if not torch.cuda.is_available() or torch.cuda.device_count() != 3:
            self.assertTrue(any("CUDA RNG states for 3 device(s)" in str(w.message) for w in caught))


if __name__ == "__main__":
    unittest.main()
