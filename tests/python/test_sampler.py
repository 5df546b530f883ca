import unittest

import harness  # noqa: F401
from spotvisor_helper import ResumableSampler


def take(sampler, n):
    """n batches, crossing epochs the way a training loop does."""
    out = []
    while len(out) < n:
        for batch in sampler:
            out.append(batch)
            if len(out) == n:
                break
    return out


class ResumableSamplerTest(unittest.TestCase):
    def test_each_epoch_is_a_permutation_and_epochs_differ(self):
        s = ResumableSampler(40, seed=3, batch_size=8)
        self.assertEqual(len(s), 5)
        epochs = [sum(list(s), []) for _ in range(3)]
        for order in epochs:
            self.assertEqual(sorted(order), list(range(40)))
        self.assertNotEqual(epochs[0], epochs[1])
        self.assertNotEqual(epochs[0], list(range(40)))
        self.assertEqual(s.epoch, 3)

    def test_same_seed_same_order_other_seed_other_order(self):
        a = take(ResumableSampler(30, 1, 4), 20)
        self.assertEqual(a, take(ResumableSampler(30, 1, 4), 20))
        self.assertNotEqual(a, take(ResumableSampler(30, 2, 4), 20))

    def test_resume_at_every_cut_equals_uninterrupted_order(self):
        total = 25                  # 3 epochs of 7 batches and a bit (drop_last: 50 // 7)
        reference = take(ResumableSampler(50, seed=11, batch_size=7), total)
        for cut in range(total + 1):
            with self.subTest(cut=cut):
                first = ResumableSampler(50, seed=11, batch_size=7)
                head = take(first, cut)
                state = first.state_dict()
                second = ResumableSampler(50, seed=11, batch_size=7)
                second.load_state_dict(state)
                self.assertEqual(head + take(second, total - cut), reference)

    def test_state_after_last_batch_of_an_epoch_rolls_over(self):
        s = ResumableSampler(20, seed=0, batch_size=5)
        it = iter(s)
        for _ in range(4):
            next(it)
        self.assertEqual((s.epoch, s.offset), (0, 4))     # loop stopped before StopIteration
        other = ResumableSampler(20, seed=0, batch_size=5)
        other.load_state_dict(s.state_dict())
        self.assertEqual(next(iter(other)), ResumableSampler(20, 0, 5).batch(1, 0))

    def test_no_drop_last_gives_a_short_final_batch(self):
        s = ResumableSampler(10, seed=0, batch_size=4, drop_last=False)
        sizes = [len(b) for b in s]
        self.assertEqual(sizes, [4, 4, 2])

    def test_replicas_split_each_global_batch(self):
        full = ResumableSampler(48, seed=5, batch_size=8)
        ranks = [ResumableSampler(48, seed=5, batch_size=4, num_replicas=2, rank=r) for r in range(2)]
        self.assertEqual(len(ranks[0]), 6)
        for step, (b0, b1) in enumerate(zip(*[list(r) for r in ranks])):
            self.assertEqual(len(b0), 4)
            self.assertFalse(set(b0) & set(b1))
            self.assertEqual(sorted(b0 + b1), sorted(full.batch(0, step)))

    def test_another_order_is_refused(self):
        state = ResumableSampler(100, seed=1, batch_size=10).state_dict()
        for other in (ResumableSampler(99, seed=1, batch_size=10), ResumableSampler(100, seed=2, batch_size=10),
                      ResumableSampler(100, seed=1, batch_size=10, shuffle=False)):
            with self.subTest(other=other), self.assertRaises(ValueError) as cm:
                other.load_state_dict(state)
            self.assertIn("the data order would not match", str(cm.exception))

    def test_a_position_that_is_not_a_whole_number_of_global_batches_is_refused(self):
        first = ResumableSampler(100, seed=1, batch_size=10)
        take(first, 3)  # 30 samples
        with self.assertRaises(ValueError) as cm:
            ResumableSampler(100, seed=1, batch_size=20).load_state_dict(first.state_dict())
        self.assertIn("sample 30 of epoch 0", str(cm.exception))
        self.assertIn("global batches of 20", str(cm.exception))
        take(first, 1)  # 40: two batches of 20
        other = ResumableSampler(100, seed=1, batch_size=20)
        other.load_state_dict(first.state_dict())
        self.assertEqual(next(iter(other)), ResumableSampler(100, 1, 20).batch(0, 2))

    def test_a_state_of_the_old_format_loads(self):
        state = {"epoch": 2, "offset": 3, "seed": 1, "dataset_len": 100, "batch_size": 5, "num_replicas": 2,
                 "shuffle": True, "drop_last": True}  # before `samples`: offset counted 10-sample steps
        s = ResumableSampler(100, seed=1, global_batch_size=10, num_replicas=2)
        s.load_state_dict(state)
        self.assertEqual((s.epoch, s.samples, s.offset), (2, 30, 3))

    def test_the_same_global_order_across_world_sizes(self):
        # Global batch 12 on 1, 2, 3 and 4 processes, the world size changing at every cut:
        # the union of the ranks' batches of each step is the one-process batch of that step.
        total = 20  # 2 epochs of 8 steps (100 // 12) and 4 more
        reference = take(ResumableSampler(100, seed=9, global_batch_size=12), total)
        worlds = [2, 1, 3, 4, 2]
        cuts = [0, 3, 7, 9, 15, total]
        got = []
        state = None
        for world, (a, b) in zip(worlds, zip(cuts, cuts[1:])):
            ranks = [ResumableSampler(100, seed=9, global_batch_size=12, num_replicas=world, rank=r)
                     for r in range(world)]
            for r in ranks:
                if state is not None:
                    r.load_state_dict(state)
            per_rank = [take(r, b - a) for r in ranks]
            for step in range(b - a):
                batches = [per_rank[r][step] for r in range(world)]
                self.assertEqual([len(x) for x in batches], [12 // world] * world)
                got.append(sorted(sum(batches, [])))
            state = ranks[0].state_dict()  # rank 0's state is enough
            self.assertEqual([r.state_dict() for r in ranks], [state] * world)
        self.assertEqual(got, [sorted(b) for b in reference])

    def test_invalid_arguments(self):
        for kwargs in (dict(dataset_len=0, seed=0, batch_size=1),
                       dict(dataset_len=10, seed=0, batch_size=0),
                       dict(dataset_len=10, seed=0, batch_size=2, num_replicas=2, rank=2),
                       dict(dataset_len=10, seed=0, batch_size=2, num_replicas=2, drop_last=False),
                       dict(dataset_len=3, seed=0, batch_size=4),
                       dict(dataset_len=10, seed=0),
                       dict(dataset_len=10, seed=0, batch_size=2, global_batch_size=4),
                       dict(dataset_len=10, seed=0, global_batch_size=5, num_replicas=2)):
            with self.subTest(**kwargs), self.assertRaises(ValueError):
                ResumableSampler(**kwargs)

    @unittest.skipUnless(harness.HAS_TORCH, "torch is not installed")
    def test_works_as_a_dataloader_batch_sampler(self):
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        ds = TensorDataset(torch.arange(24))
        s = ResumableSampler(24, seed=4, batch_size=6)
        loader = DataLoader(ds, batch_sampler=s, generator=torch.Generator())
        got = [b[0].tolist() for b in loader]
        self.assertEqual(got, [ResumableSampler(24, 4, 6).batch(0, i) for i in range(4)])


if __name__ == "__main__":
    unittest.main()
