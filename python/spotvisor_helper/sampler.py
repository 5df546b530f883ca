"""A deterministic batch sampler whose position can be saved and resumed mid-epoch.

The order of epoch `e` depends only on (seed, e, dataset_len), so a resumed run sees
exactly the batches an uninterrupted run would have seen. Pure Python; usable as a torch
`DataLoader(batch_sampler=...)` or on its own.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, List, Optional


class ResumableSampler:
    """Yield batches of dataset indices; remember (epoch, offset) for checkpoints.

    `offset` counts the batches of the current epoch already handed out. Iterating yields
    the rest of the current epoch, then moves to the next epoch. With `num_replicas > 1`
    (DDP), every rank builds the same global order, each step takes the next
    `batch_size * num_replicas` indices and rank `r` gets every `num_replicas`-th of them
    starting at `r`; the position is the same on every rank, so rank 0's state is enough.

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
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if dataset_len <= 0:
            raise ValueError(f"dataset_len must be > 0, got {dataset_len}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if num_replicas <= 0 or not 0 <= rank < num_replicas:
            raise ValueError(f"need 0 <= rank < num_replicas, got rank={rank}, num_replicas={num_replicas}")
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
        self.offset = 0
        self._order_epoch: Optional[int] = None
        self._order: List[int] = []

    def __len__(self) -> int:
        """Batches per epoch (per rank)."""
        global_batch = self.batch_size * self.num_replicas
        if self.drop_last:
            return self.dataset_len // global_batch
        return -(-self.dataset_len // global_batch)

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
        global_batch = self.batch_size * self.num_replicas
        start = index * global_batch
        chunk = self.order(epoch)[start:start + global_batch]
        return chunk[self.rank::self.num_replicas]

    def set_epoch(self, epoch: int) -> None:
        """Jump to the start of `epoch` (DistributedSampler-compatible)."""
        self.epoch, self.offset = epoch, 0

    def __iter__(self) -> Iterator[List[int]]:
        per_epoch = len(self)
        if self.offset >= per_epoch:
            self.epoch, self.offset = self.epoch + 1, 0
        while self.offset < per_epoch:
            batch = self.batch(self.epoch, self.offset)
            self.offset += 1
            yield batch
        self.epoch, self.offset = self.epoch + 1, 0

    def state_dict(self) -> Dict[str, Any]:
        return {
            "epoch": self.epoch,
            "offset": self.offset,
            "seed": self.seed,
            "dataset_len": self.dataset_len,
            "batch_size": self.batch_size,
            "num_replicas": self.num_replicas,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume at the saved position; the sampler's configuration must be the same."""
        for key in ("seed", "dataset_len", "batch_size", "num_replicas", "shuffle", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state was saved with {key}={state[key]!r} but this sampler has "
                    f"{key}={getattr(self, key)!r}; the data order would not match"
                )
        self.epoch = int(state["epoch"])
        self.offset = int(state["offset"])

    def __repr__(self) -> str:
        return (f"ResumableSampler(dataset_len={self.dataset_len}, seed={self.seed}, "
                f"batch_size={self.batch_size}, epoch={self.epoch}, offset={self.offset})")
