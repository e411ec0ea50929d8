"""The batch orders, and the Loader that runs a DataLoader over them. A validation rank takes its share of the
split's batches; training takes each epoch's batches from a seeded (distributed) shuffle or --rect's aspect batches,
epoch after epoch without end, so a DataLoader's workers go on into the next epoch while the trainer validates
and saves (yolov5's InfiniteDataLoader idea). Keys are (epoch, index): a sample's augmentation is seeded by both."""

from __future__ import annotations

import atexit
import signal
import weakref
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from detect.data.batch import Batch, collate
from detect.data.labels.split import LabelledSplit
from detect.data.records import RecordTable


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


class Loader:
    """A DataLoader of Batch with its split (records, names); a training loader is iterated one epoch at a time,
    set by set_epoch, over one stream of batches that runs on across epochs. `imgsz`: the square side a validation
    loader letterboxes to (None for a training loader)."""

    def __init__(self, loader: DataLoader, split: LabelledSplit, dataset: torch.utils.data.Dataset,
                 sampler: EpochBatchSampler | None = None, imgsz: int | None = None) -> None:
        self.loader, self.split, self.dataset, self.sampler, self.imgsz = loader, split, dataset, sampler, imgsz
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


def loader_options(workers: int, pin_memory: bool, prefetch_factor: int) -> dict:
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
