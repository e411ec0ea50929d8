"""Loader workers that fetch ahead from a bucket: a batch's samples are made in threads, so that the reads of their
images (a mosaic's three others too) overlap, and the images of the worker's next batch in the sampler's order are
fetched meanwhile; the bucket's latency then does not stall the steps. Only this rank's sampler shard is fetched
ahead, so each node reads what its ranks use."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

# Samples of a batch made at once: a batch's bucket reads in flight together (a loader worker waits on the network,
# not on its cores, for these).
SAMPLE_THREADS = 16
AHEAD_THREADS = 8  # fetches of the next batch's images, beside them


class FetchAhead(torch.utils.data.Dataset):
    """`dataset` whose batches (DataLoader's __getitems__) are made in threads, the worker's next batch of
    `batches(epoch)` (this rank's batches of dataset indices) fetched meanwhile by `fetch` (of a path); attributes
    are the dataset's."""

    def __init__(self, dataset: torch.utils.data.Dataset, batches: Callable[[int], list[list[int]]],
                 fetch: Callable[[str], None]) -> None:
        self.dataset, self.batches, self.fetch = dataset, batches, fetch
        self._pid, self._plans = None, {}

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str):
        if name == "dataset":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __getitem__(self, key):
        return self.dataset[key]

    def __getitems__(self, keys: list) -> list:
        if self._pid != os.getpid():  # thread pools do not survive the fork into a loader worker: one per process
            self._pid, self._local = os.getpid(), threading.local()
            self._samples, self._ahead = ThreadPoolExecutor(SAMPLE_THREADS), ThreadPoolExecutor(AHEAD_THREADS)
        self._fetch_next(keys)
        return list(self._samples.map(self._sample, keys))

    def _sample(self, key):
        """The sample, made by this thread's copy of the dataset (its own random generator: a sample's randomness
        is keyed by seed, epoch and index alone, so threads give the samples one thread would)."""
        if not hasattr(self._local, "dataset"):
            self._local.dataset = self.dataset.for_thread() if hasattr(self.dataset, "for_thread") else self.dataset
        return self._local.dataset[key]

    def _plan(self, epoch: int) -> tuple[list[list[int]], dict[tuple[int, ...], int]]:
        """The epoch's batches, and each batch's position among them (the last two epochs kept)."""
        if epoch not in self._plans:
            batches = self.batches(epoch)
            self._plans = {key: value for key, value in self._plans.items() if key >= epoch - 1}
            self._plans[epoch] = (batches, {tuple(batch): position for position, batch in enumerate(batches)})
        return self._plans[epoch]

    def _fetch_next(self, keys: list) -> None:
        """Start fetching the images of the batch this worker gets next (workers take batches in turn)."""
        epoch = keys[0][0] if isinstance(keys[0], tuple) else 0
        indices = tuple(key[1] if isinstance(key, tuple) else key for key in keys)
        batches, positions = self._plan(epoch)
        if indices not in positions:
            return
        worker = torch.utils.data.get_worker_info()
        position = positions[indices] + (worker.num_workers if worker is not None else 1)
        if position >= len(batches) and isinstance(keys[0], tuple):
            position, batches = position - len(batches), self._plan(epoch + 1)[0]
        if position < len(batches):
            paths = self.dataset.records.paths
            for index in batches[position]:
                self._ahead.submit(self.fetch, os.fsdecode(paths[index]))  # a failed fetch is met again later

