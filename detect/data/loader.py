"""build_train_loader / build_val_loader: DataLoaders with seeded (distributed) samplers and fixed batch shapes."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from detect.data.augment.settings import AugmentSettings
from detect.data.batch import Batch, collate
from detect.data.data_config import DataConfig
from detect.data.datasets import RectTrainDataset, TrainDataset, ValDataset
from detect.data.images.cache import build_image_cache
from detect.data.labels.split import LabelledSplit, load_split
from detect.data.records import RecordTable
from detect.errors import UserError


def default_workers(world_size: int = 1) -> int:
    """CPU workers per rank: the cores shared between ranks, at most 8."""
    return max(0, min(8, (os.cpu_count() or 1) // max(world_size, 1)))


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


class EpochSampler(Sampler[tuple[int, int]]):
    """Yields (epoch, index) so each sample's augmentation is seeded by (seed, epoch, index)."""

    def __init__(self, base: ShuffleSampler | DistributedSampler) -> None:
        self.base, self.epoch, self.skip = base, 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Set the epoch of the shuffle and of the augmentation seeds; leave out the epoch's first `skip` samples."""
        self.epoch, self.skip = epoch, skip
        self.base.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((self.epoch, index) for index in itertools.islice(self.base, self.skip, None))

    def __len__(self) -> int:
        return len(self.base)


class RectBatchSampler(Sampler[list[tuple[int, int]]]):
    """--rect: whole aspect-ratio batches of (epoch, index) keys; rank r of W takes every W-th batch of an order drawn
    from seed + epoch, so all ranks get the same number of batches and a batch keeps its one shape."""

    def __init__(self, size: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.batches = [list(range(start, min(start + batch_size, size))) for start in range(0, size, batch_size)]
        self.seed, self.rank, self.world_size, self.epoch, self.skip = seed, rank, world_size, 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Pick the batch order and the augmentation seeds of this epoch; leave out its first `skip` batches."""
        self.epoch, self.skip = epoch, skip

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.batches), generator=generator).tolist()[:len(self) * self.world_size]
        for position in order[self.rank::self.world_size][self.skip:]:
            yield [(self.epoch, index) for index in self.batches[position]]

    def __len__(self) -> int:
        return len(self.batches) // self.world_size


class Loader:
    """A DataLoader of Batch with its split (records, names) and set_epoch."""

    def __init__(self, loader: DataLoader, split: LabelledSplit, dataset: torch.utils.data.Dataset,
                 sampler: EpochSampler | RectBatchSampler | None = None) -> None:
        self.loader, self.split, self.dataset, self.sampler = loader, split, dataset, sampler

    @property
    def records(self) -> RecordTable:
        """The usable images of the split (in file order; the val dataset holds them in batch order)."""
        return self.split.records

    @property
    def names(self) -> list[str]:
        """Class names."""
        return self.split.names

    @property
    def coco_json(self) -> Path | None:
        """The split's COCO json label source, if any."""
        return self.split.coco_json

    @property
    def category_ids(self) -> list[int] | None:
        """Class index -> COCO category id for json sources."""
        return self.split.category_ids

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Reshuffle (training), and start the epoch at batch `start_batch` (a run resumed inside an epoch: the
        batches after it are the ones the whole epoch would have given); a no-op for validation."""
        if isinstance(self.sampler, EpochSampler):
            self.sampler.set_epoch(epoch, skip=start_batch * self.loader.batch_size)
        elif self.sampler is not None:
            self.sampler.set_epoch(epoch, skip=start_batch)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


def _ignore_stop_signals(_worker_id: int) -> None:
    """A worker leaves Ctrl-C and SIGTERM to the main process, which stops the run at a step boundary and then
    ends the workers; a worker that died of the signal would fail the batches the main process still takes."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)


def _loader_options(workers: int, pin_memory: bool, prefetch_factor: int) -> dict:
    options: dict = {"num_workers": workers, "pin_memory": pin_memory, "collate_fn": collate}
    if workers > 0:
        # The workers are the parallelism: cv2's own thread pool in each would fight them for the cores. Set in this
        # process before the workers fork (calling it inside a forked worker can deadlock on the inherited pool),
        # and apply it here with one small parallel op: cv2 tears its old pool down lazily, on the next parallel
        # call, and a forked worker that makes that call waits forever on the parent's threads.
        cv2.setNumThreads(0)
        cv2.resize(np.zeros((1024, 1024, 3), np.uint8), (512, 512))
        options.update(persistent_workers=True, prefetch_factor=prefetch_factor, worker_init_fn=_ignore_stop_signals)
    return options


def build_train_loader(data_config: DataConfig, augmentation: AugmentSettings, imgsz: int, batch_size: int,
                       workers: int, seed: int, rank: int = 0, world_size: int = 1, cache: str | None = None,
                       pin_memory: bool = True, prefetch_factor: int = 2, split: str = "train",
                       single_class: bool = False, rect: bool = False, stride: int = 32) -> Loader:
    """Augmented imgsz x imgsz batches of batch_size per rank, drop_last (one shape), reshuffled by set_epoch;
    with `rect`, aspect-ratio batches of one shape each (RectTrainDataset, RectBatchSampler)."""
    labelled = load_split(data_config, split, single_class)
    cached = build_image_cache(labelled.records, imgsz, cache)
    options = _loader_options(workers, pin_memory, prefetch_factor)
    if rect:
        dataset = RectTrainDataset(labelled.records, augmentation, imgsz, seed, batch_size, stride, cached)
        sampler = RectBatchSampler(len(dataset), batch_size, seed, rank, world_size)
        if len(sampler) == 0:
            raise UserError(f"{data_config.source}: {len(dataset)} training images make fewer batches than ranks")
        return Loader(DataLoader(dataset, batch_sampler=sampler, **options), labelled, dataset, sampler)
    dataset = TrainDataset(labelled.records, augmentation, imgsz, seed, cached)
    if world_size > 1:
        base = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    else:
        base = ShuffleSampler(len(dataset), seed)
    if len(base) < batch_size:
        raise UserError(f"{data_config.source}: {len(base)} training images per rank, fewer than batch size {batch_size}")
    sampler = EpochSampler(base)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, **options)
    return Loader(loader, labelled, dataset, sampler)


def build_val_loader(data_config: DataConfig, split: str = "val", imgsz: int = 640, batch_size: int = 32,
                     workers: int | None = None, stride: int = 32, rect: bool = True, pin_memory: bool = True,
                     prefetch_factor: int = 2, single_class: bool = False) -> Loader:
    """Letterboxed rectangular batches of the whole split in aspect order (under DDP rank 0 alone evaluates)."""
    labelled = load_split(data_config, split, single_class)
    dataset = ValDataset(labelled.records, imgsz, batch_size, stride, rect=rect)
    workers = default_workers() if workers is None else workers
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False,
                        **_loader_options(workers, pin_memory, prefetch_factor))
    return Loader(loader, labelled, dataset)
