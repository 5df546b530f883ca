"""A deterministic batch sampler whose position can be saved and resumed mid-epoch.

The order of epoch `e` depends only on (seed, e, dataset_len), so a resumed run sees
exactly the batches an uninterrupted run would have seen, also with another number of
processes: the position is the count of samples of the epoch's global order handed out.
Pure Python; usable as a torch `DataLoader(batch_sampler=...)` or on its own.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, List, Optional


class ResumableSampler:
    """Yield batches of dataset indices; remember (epoch, samples) for checkpoints.

    Each step takes the next global batch of the epoch's order: `batch_size * num_replicas`
    indices, or `global_batch_size` when given (then each rank's batch is that divided by
    `num_replicas`). Rank `r` gets every `num_replicas`-th index of it starting at `r`. The
    position (`samples` of the epoch handed out; `offset` = whole batches) is the same on
    every rank, so rank 0's state is enough.

    Across world sizes: a state saved by N processes loads into M. With a fixed
    `global_batch_size` every step sees the same samples in the same order whatever the
    number of processes, so DDP (which averages the ranks' gradients) computes the same
    update up to floating-point summation order; the group that shrank or grew goes on
    from the sample it stopped at. A state whose position is not a whole number of this
    sampler's global batches is refused.

    Position is counted when a batch is handed out. With a torch DataLoader use
    `num_workers=0` (no prefetching), or the saved position runs ahead of training; and
    pass the DataLoader its own `generator=torch.Generator()`, because each new DataLoader
    iterator otherwise draws a seed from the global torch RNG, and a resumed run creates
    its iterator at a different moment than an uninterrupted one.
    """

    def __init__(
        self,
        dataset_len: int,
        seed: int,
        batch_size: Optional[int] = None,
        *,
        global_batch_size: Optional[int] = None,
        shuffle: bool = True,
        drop_last: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if dataset_len <= 0:
            raise ValueError(f"dataset_len must be > 0, got {dataset_len}")
        if num_replicas <= 0 or not 0 <= rank < num_replicas:
            raise ValueError(f"need 0 <= rank < num_replicas, got rank={rank}, num_replicas={num_replicas}")
        if (batch_size is None) == (global_batch_size is None):
            raise ValueError("give batch_size (per rank) or global_batch_size (all ranks together), not both")
        if global_batch_size is not None:
            if global_batch_size <= 0 or global_batch_size % num_replicas:
                raise ValueError(f"global_batch_size {global_batch_size} is not a positive multiple of "
                                 f"num_replicas {num_replicas}")
            batch_size = global_batch_size // num_replicas
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if num_replicas > 1 and not drop_last:
            raise ValueError("num_replicas > 1 needs drop_last=True (every rank takes equal batches)")
        if dataset_len < batch_size * num_replicas and drop_last:
            raise ValueError(
                f"dataset_len {dataset_len} is smaller than one global batch "
                f"({batch_size} x {num_replicas} replicas)"
            )
        self.dataset_len = dataset_len
        self.seed = seed
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.samples = 0  # of the epoch's global order handed out
        self._order_epoch: Optional[int] = None
        self._order: List[int] = []

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.num_replicas

    @property
    def offset(self) -> int:
        """Batches of the current epoch handed out."""
        return -(-self.samples // self.global_batch_size)

    @offset.setter
    def offset(self, batches: int) -> None:
        self.samples = min(batches * self.global_batch_size, self._end())

    def _end(self) -> int:
        """Where an epoch ends: after its last whole global batch (drop_last), or the data."""
        if self.drop_last:
            return self.dataset_len // self.global_batch_size * self.global_batch_size
        return self.dataset_len

    def __len__(self) -> int:
        """Batches per epoch (per rank)."""
        if self.drop_last:
            return self.dataset_len // self.global_batch_size
        return -(-self.dataset_len // self.global_batch_size)

    def order(self, epoch: int) -> List[int]:
        """The global index order of `epoch`."""
        if self._order_epoch != epoch:
            order = list(range(self.dataset_len))
            if self.shuffle:
                random.Random(f"spotvisor-sampler:{self.seed}:{epoch}").shuffle(order)
            self._order, self._order_epoch = order, epoch
        return self._order

    def batch(self, epoch: int, index: int) -> List[int]:
        """This rank's batch number `index` of `epoch`."""
        return self._slice(epoch, index * self.global_batch_size)

    def _slice(self, epoch: int, start: int) -> List[int]:
        chunk = self.order(epoch)[start:start + self.global_batch_size]
        return chunk[self.rank::self.num_replicas]

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of `epoch` (DistributedSampler-compatible)."""
        self.epoch, self.samples = epoch, 0

    def __iter__(self) -> Iterator[List[int]]:
        end = self._end()
        if self.samples >= end:
            self.epoch, self.samples = self.epoch + 1, 0
        while self.samples < end:
            batch = self._slice(self.epoch, self.samples)
            self.samples = min(self.samples + self.global_batch_size, self.dataset_len)
            yield batch
        self.epoch, self.samples = self.epoch + 1, 0

    def state_dict(self) -> Dict[str, Any]:
        return {
            "epoch": self.epoch,
            "samples": self.samples,
            "offset": self.offset,
            "seed": self.seed,
            "dataset_len": self.dataset_len,
            "batch_size": self.batch_size,
            "num_replicas": self.num_replicas,
            "global_batch_size": self.global_batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume at the saved position. The order must be the same (seed, dataset_len,
        shuffle, drop_last); the number of processes and the batch may differ as long as the
        position is a whole number of this sampler's global batches."""
        for key in ("seed", "dataset_len", "shuffle", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state was saved with {key}={state[key]!r} but this sampler has "
                    f"{key}={getattr(self, key)!r}; the data order would not match"
                )
        if "samples" in state:
            samples = int(state["samples"])
        else:  # saved before the position was counted in samples
            saved_global = int(state.get("batch_size", self.batch_size)) * int(state.get("num_replicas", 1))
            samples = min(int(state["offset"]) * saved_global, self.dataset_len)
        if samples % self.global_batch_size and samples < self._end():
            raise ValueError(
                f"sampler state was saved at sample {samples} of epoch {state['epoch']}, which is not a whole "
                f"number of this sampler's global batches of {self.global_batch_size} "
                f"({self.batch_size} x {self.num_replicas} replicas); the steps would not line up"
            )
        self.epoch = int(state["epoch"])
        self.samples = samples

    def __repr__(self) -> str:
        return (f"ResumableSampler(dataset_len={self.dataset_len}, seed={self.seed}, "
                f"batch_size={self.batch_size}, num_replicas={self.num_replicas}, epoch={self.epoch}, "
                f"samples={self.samples})")
