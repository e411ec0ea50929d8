"""build_train_loader / build_val_loader: DataLoaders with seeded (distributed) batch orders (sampling.py) and
fixed batch shapes."""

from __future__ import annotations

import atexit
import os
import signal
import weakref
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

from detect.data.augment.settings import AugmentSettings
from detect.data.batch import Batch, collate
from detect.data.data_config import DataConfig
from detect.data.datasets import RectTrainDataset, TrainDataset, ValDataset
from detect.data.images.cache import build_image_cache
from detect.data.images.pixels import DEFAULT_MAX_PIXELS
from detect.data.images.ram_cache import NodeShare
from detect.data.labels.split import LabelledSplit, load_split
from detect.data.records import RecordTable
from detect.data.remote.fetch_ahead import FetchAhead
from detect.data.sampling import EpochBatchSampler, RectBatches, ShuffledBatches, ShuffleSampler, ValShard
from detect.errors import UserError


def default_workers(world_size: int = 1) -> int:
    """CPU workers per rank: the cores shared between ranks, at most 8."""
    return max(0, min(8, (os.cpu_count() or 1) // max(world_size, 1)))


class Loader:
    """A DataLoader of Batch with its split (records, names); a training loader is iterated one epoch at a time,
    set by set_epoch, over one stream of batches that runs on across epochs."""

    def __init__(self, loader: DataLoader, split: LabelledSplit, dataset: torch.utils.data.Dataset,
                 sampler: EpochBatchSampler | None = None) -> None:
        self.loader, self.split, self.dataset, self.sampler = loader, split, dataset, sampler
        self.epoch, self.start_batch = 0, 0
        self._stream: Iterator[Batch] | None = None
        self._position: tuple[int, int] | None = None  # the (epoch, batch) the stream yields next

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
        """The epoch the next iteration gives (training; a no-op for validation), from batch `start_batch` (a run
        resumed inside an epoch: the batches after it are the ones the whole epoch would have given)."""
        self.epoch, self.start_batch = epoch, start_batch

    def epoch_indices(self) -> list[int]:
        """The dataset indices of the set epoch, in batch order (training)."""
        return [index for _, index in self.sampler.keys(self.epoch)]

    def __iter__(self) -> Iterator[Batch]:
        if self.sampler is None:  # validation: persistent workers, one iterator that the DataLoader keeps
            return self._open()
        wanted = (self.epoch, self.start_batch)
        if self._stream is None or self._position != wanted:  # the stream is elsewhere: start it there
            self.sampler.start(*wanted)
            self._stream, self._position = self._open(), wanted
        return self._epoch_batches(*wanted)

    def _open(self) -> Iterator[Batch]:
        """The DataLoader's iterator, its workers (if any) ended by the exit hook should it still be open then."""
        batches = iter(self.loader)
        if self.loader.num_workers > 0:
            _OPEN_STREAMS.add(batches)
        return batches

    def worker_pids(self) -> list[int]:
        """The process ids of the training stream's workers (none before it starts, or without workers)."""
        return [worker.pid for worker in getattr(self._stream, "_workers", [])]

    def start(self, epoch: int, start_batch: int = 0) -> None:
        """Set the epoch and start the workers on its batches now, so that they have batches ready when training
        first asks (a run builds its model meanwhile). The global RNG is left as it was: the DataLoader draws its
        base seed from it, which the samples do not use (their randomness is keyed by seed, epoch and index)."""
        self.set_epoch(epoch, start_batch)
        with torch.random.fork_rng(devices=[]):
            iter(self)

    def _epoch_batches(self, epoch: int, start: int) -> Iterator[Batch]:
        for batch in range(start, len(self)):
            item = next(self._stream)
            self._position = (epoch, batch + 1) if batch + 1 < len(self) else (epoch + 1, 0)
            yield item

    def __len__(self) -> int:
        return len(self.loader)


# The streams (training, and validation's persistent iterators) whose workers may still run: they ignore SIGTERM
# (below), which is how multiprocessing ends a process's workers at exit, so a stream still open then would leave the
# exit waiting for them forever.
_OPEN_STREAMS: weakref.WeakSet = weakref.WeakSet()


@atexit.register  # registered after multiprocessing's own exit hook (torch imports it first), so it runs before
def _end_open_streams() -> None:
    for stream in list(_OPEN_STREAMS):
        stream._shutdown_workers()  # what the DataLoader iterator does when it is deleted


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
                       single_class: bool = False, rect: bool = False, stride: int = 32,
                       cache_dir: str | Path | None = None, checked: LabelledSplit | None = None,
                       share: NodeShare | None = None) -> Loader:
    """Augmented imgsz x imgsz batches of batch_size per rank, drop_last (one shape), reshuffled by set_epoch;
    with `rect`, aspect-ratio batches of one shape each (RectTrainDataset, RectBatchSampler). `checked`: the split
    as load_split gave it (else checked here); `cache_dir` and `share`: where caches go (build_image_cache)."""
    labelled = checked or load_split(data_config, split, single_class, cache_dir)
    cached = build_image_cache(labelled.records, imgsz, cache, cache_dir, share)
    options = _loader_options(workers, pin_memory, prefetch_factor)
    if rect:
        dataset = RectTrainDataset(labelled.records, augmentation, imgsz, seed, batch_size, stride, cached)
        batches = RectBatches(len(dataset), batch_size, seed, rank, world_size)
        if len(batches) == 0:
            raise UserError(f"{data_config.source}: {len(dataset)} training images make fewer batches than ranks")
    else:
        dataset = TrainDataset(labelled.records, augmentation, imgsz, seed, cached)
        if world_size > 1:
            base = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
                                      drop_last=True)
        else:
            base = ShuffleSampler(len(dataset), seed)
        if len(base) < batch_size:
            raise UserError(f"{data_config.source}: {len(base)} training images per rank, fewer than batch size "
                            f"{batch_size}")
        batches = ShuffledBatches(base, batch_size)
    sampler = EpochBatchSampler(batches)
    if data_config.remote is not None:
        dataset = FetchAhead(dataset, batches.of_epoch)
    return Loader(DataLoader(dataset, batch_sampler=sampler, **options), labelled, dataset, sampler)


def build_val_loader(data_config: DataConfig, split: str = "val", imgsz: int = 640, batch_size: int = 32,
                     workers: int | None = None, stride: int = 32, rect: bool = True, pin_memory: bool = True,
                     prefetch_factor: int = 2, single_class: bool = False, rank: int = 0,
                     world_size: int = 1, cache_dir: str | Path | None = None,
                     checked: LabelledSplit | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> Loader:
    """Letterboxed rectangular batches of the whole split in aspect order; with `world_size` ranks, this rank's
    whole batches of them (sampling.ValShard). `checked`: the split as load_split gave it (else checked here, its
    label cache in `cache_dir` when given, images over `max_pixels` skipped)."""
    labelled = checked or load_split(data_config, split, single_class, cache_dir, max_pixels)
    dataset = ValDataset(labelled.records, imgsz, batch_size, stride, rect=rect)
    workers = default_workers() if workers is None else workers
    shard = ValShard(len(dataset), batch_size, rank, world_size)
    batching = {"batch_size": batch_size, "shuffle": False} if world_size == 1 else {"batch_sampler": shard}
    if data_config.remote is not None:
        dataset = FetchAhead(dataset, lambda _epoch: shard.batches)
    loader = DataLoader(dataset, **batching, **_loader_options(workers, pin_memory, prefetch_factor))
    return Loader(loader, labelled, dataset)
