"""The batch orders: a validation rank's share of the split's batches, and the training batch order: each epoch's batches from a seeded (distributed) shuffle or --rect's aspect batches,
epoch after epoch without end, so a DataLoader's workers go on into the next epoch while the trainer validates
and saves (yolov5's InfiniteDataLoader idea). Keys are (epoch, index): a sample's augmentation is seeded by both."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DistributedSampler, Sampler


class ShuffleSampler(Sampler[int]):
    """A permutation drawn from seed + epoch (the single-process twin of DistributedSampler)."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Pick the permutation of this epoch."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self) -> int:
        return self.size


class ShuffledBatches:
    """An epoch's batches of a shuffle: its order cut into batch_size, the last partial batch dropped."""

    def __init__(self, base: ShuffleSampler | DistributedSampler, batch_size: int) -> None:
        self.base, self.batch_size = base, batch_size

    def of_epoch(self, epoch: int) -> list[list[int]]:
        self.base.set_epoch(epoch)
        order, size = list(self.base), self.batch_size
        return [order[start:start + size] for start in range(0, len(order) - size + 1, size)]

    def __len__(self) -> int:
        return len(self.base) // self.batch_size


class RectBatches:
    """--rect: whole aspect-ratio batches; rank r of W takes every W-th batch of an order drawn from seed + epoch, so
    all ranks get the same number of batches and a batch keeps its one shape."""

    def __init__(self, size: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.batches = [list(range(start, min(start + batch_size, size))) for start in range(0, size, batch_size)]
        self.seed, self.rank, self.world_size = seed, rank, world_size

    def of_epoch(self, epoch: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(len(self.batches), generator=generator).tolist()[:len(self) * self.world_size]
        return [self.batches[position] for position in order[self.rank::self.world_size]]

    def __len__(self) -> int:
        return len(self.batches) // self.world_size


class EpochBatchSampler(Sampler[list[tuple[int, int]]]):
    """From (epoch, batch) on, every batch of that epoch, then of the next ones, as (epoch, index) keys; its length
    is one epoch's batches."""

    def __init__(self, batches: ShuffledBatches | RectBatches) -> None:
        self.batches, self.epoch, self.batch = batches, 0, 0

    def start(self, epoch: int, batch: int = 0) -> None:
        """Where the next iteration begins (a run resumed inside an epoch skips the batches done, unread)."""
        self.epoch, self.batch = epoch, batch

    def keys(self, epoch: int) -> list[tuple[int, int]]:
        """One epoch's (epoch, index) keys in batch order."""
        return [(epoch, index) for batch in self.batches.of_epoch(epoch) for index in batch]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch, skip = self.epoch, self.batch
        while True:
            for batch in self.batches.of_epoch(epoch)[skip:]:
                yield [(epoch, index) for index in batch]
            epoch, skip = epoch + 1, 0

    def __len__(self) -> int:
        return len(self.batches)


class ValShard(Sampler[list[int]]):
    """Validation on several ranks: rank r of W takes whole batches r, r + W, r + 2W, ... of the split's batches in
    order, so every image is predicted once, in the batch (and so the letterbox shape) of a one-process pass."""

    def __init__(self, size: int, batch_size: int, rank: int, world_size: int) -> None:
        starts = range(0, size, batch_size)[rank::world_size]
        self.batches = [list(range(start, min(start + batch_size, size))) for start in starts]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)
