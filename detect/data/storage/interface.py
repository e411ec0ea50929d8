"""The calls every dataset storage answers (local folders: local.py; a bucket: bucket.py): list a split's images, make
a file local before it is read, say what the label cache's key holds and where the cache goes, and run the loader's
dataset as the storage needs."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from detect.data.storage.files import Listing, require_file


class Storage(abc.ABC):
    """Where a dataset's bytes come from; the label check, the caches and the loaders then read local paths."""

    # Threads of the label check, each fetching its image and label file first; None: the check's own pools (the
    # check is the work, not the reads).
    check_threads: int | None = None
    # Whether a split is checked by one rank of a job, its label cache sent to every node (which would otherwise
    # fetch every file to check it), rather than by each node's first rank.
    check_once_per_job = False

    @abc.abstractmethod
    def list_images(self, source: Path) -> Listing:
        """The images of a split's source (a folder, a .txt list of paths, one image), as strings; a listed path
        that cannot be read is named by the label check."""

    @abc.abstractmethod
    def holds(self, path: str | os.PathLike) -> bool:
        """Whether the storage has `path` to read."""

    @abc.abstractmethod
    def fetch(self, path: str | os.PathLike) -> None:
        """Make `path` a local file before it is read."""

    def local_file(self, path: str | os.PathLike) -> None:
        """fetch `path`, then an OSError unless it is a regular file (files.require_file): a FIFO put in an image's
        place would block its reader."""
        self.fetch(path)
        require_file(path)

    @abc.abstractmethod
    def fetch_tree(self, path: str | os.PathLike) -> None:
        """fetch every file under `path` (a folder of label files) or `path` itself."""

    @abc.abstractmethod
    def key_of(self, paths: Sequence[str]) -> tuple[list[str], np.ndarray | None]:
        """What the label cache's key names `paths` by, and their (n, 2) [size, modified ns], or None for the key to
        stat them itself (labels/cache.py, fingerprint)."""

    @abc.abstractmethod
    def cache_file(self, usual: Path, cache_dir: str | Path | None) -> Path:
        """Where the label cache whose usual place, beside the labels, is `usual` goes."""

    def keep_label_cache(self, name: str, contents: bytes) -> None:
        """Keep the label cache `name` that the job's main rank checked and sent (check_once_per_job storages only)."""
        raise TypeError(f"{type(self).__name__} is checked by each node's first rank: no label cache is sent to it")

    @abc.abstractmethod
    def loader_dataset(self, dataset: Dataset, batches: Callable[[int], list[list[int]]]) -> Dataset:
        """The dataset the loader's workers run, given `dataset` and `batches(epoch)`, this rank's batches of dataset
        indices."""
