"""Local folders as a dataset's storage (the interface: interface.py): every file is read where its path says."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from detect.data.records import IMAGE_SUFFIXES
from detect.data.storage.cache_places import cache_path
from detect.data.storage.files import Listing, is_image, walk
from detect.data.storage.interface import Storage
from detect.errors import UserError


class LocalStorage(Storage):
    """A dataset's files on a local disk (or a network file system mounted as one): nothing is fetched."""

    def list_images(self, source: Path) -> Listing:
        """Images of a folder (recursive: files.walk, links followed, loops and special files named), a .txt list of
        paths (relative to the list's folder), or one image; as strings, since a 118k split's Path objects alone
        would cost tens of MB and most of a second. A listed path that cannot be read is named by the label check."""
        try:
            mode = os.stat(source).st_mode
        except OSError:
            mode = 0
        if stat.S_ISDIR(mode):
            return walk(str(source), is_image)
        if source.suffix == ".txt" and stat.S_ISREG(mode):
            return Listing(listed_images(source))
        if mode and source.suffix.lower() in IMAGE_SUFFIXES:
            return Listing([str(source)])
        raise UserError(f"{source}: no such image folder or image list (check 'path' and the split in the data "
                        "yaml)")

    def holds(self, path: str | os.PathLike) -> bool:
        """Whether the storage has `path` to read (locally: whatever is there; the reader names a missing file)."""
        return True

    def fetch(self, path: str | os.PathLike) -> None:
        """Here every path is a local file already (a bucket fetches it into its cache)."""

    def fetch_tree(self, path: str | os.PathLike) -> None:
        """Nothing to fetch."""

    def key_of(self, paths: Sequence[str]) -> tuple[list[str], np.ndarray | None]:
        """The paths themselves; the key stats them (labels/cache.py, fingerprint)."""
        return list(paths), None

    def cache_file(self, usual: Path, cache_dir: str | Path | None) -> Path:
        """Beside the labels while their folder is writable, else the cache folder (cache_places.cache_path)."""
        return cache_path(usual, cache_dir)

    def loader_dataset(self, dataset: Dataset, batches: Callable[[int], list[list[int]]]) -> Dataset:
        """`dataset` itself (a bucket's fetches the next batch ahead)."""
        return dataset


LOCAL = LocalStorage()


def listed_images(source: Path) -> list[str]:
    """The paths of a .txt image list, relative ones from the list's folder."""
    try:
        text = source.read_text()
    except OSError as error:
        raise UserError(f"{source}: cannot read the image list ({error.strerror or error})") from None
    images = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            entry = Path(line.removeprefix("./"))
            images.append(str(entry if entry.is_absolute() else (source.parent / entry)))
    return images
