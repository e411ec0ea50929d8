"""Local folders as a dataset's storage, and the calls every storage answers (a bucket's: data/remote/bucket.py):
list a split's images, make a file local before it is read, say what the label cache's key holds and where the cache
goes, and run the loader's dataset as the storage needs."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from detect.data.records import IMAGE_SUFFIXES
from detect.data.storage.files import Listing, is_image, require_file, walk
from detect.data.storage.places import cache_path
from detect.errors import UserError


class Storage:
    """A dataset's files on a local disk (or a network file system mounted as one): every file is read where its
    path says, nothing is fetched."""

    # Threads of the label check, each fetching its image and label file first; None: the check's own pools (the
    # check is the work, not the reads).
    check_threads: int | None = None
    # Whether a split is checked by one rank of a job, its label cache sent to every node (which would otherwise
    # fetch every file to check it), rather than by each node's first rank.
    check_once_per_job = False

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
        """Make `path` a local file before it is read (a bucket fetches it into its cache); here it is one."""

    def local_file(self, path: str | os.PathLike) -> None:
        """fetch `path`, then an OSError unless it is a regular file (files.require_file): a FIFO put in an image's
        place would block its reader."""
        self.fetch(path)
        require_file(path)

    def fetch_tree(self, path: str | os.PathLike) -> None:
        """fetch every file under `path` (a folder of label files) or `path` itself."""

    def key_of(self, paths: Sequence[str]) -> tuple[list[str], np.ndarray | None]:
        """What the label cache's key names `paths` by, and their (n, 2) [size, modified ns], or None for the key to
        stat them itself (labels/cache.py, fingerprint)."""
        return list(paths), None

    def cache_file(self, usual: Path, cache_dir: str | Path | None) -> Path:
        """Where the label cache whose usual place, beside the labels, is `usual` goes (places.cache_path)."""
        return cache_path(usual, cache_dir)

    def loader_dataset(self, dataset: Dataset, batches: Callable[[int], list[list[int]]]) -> Dataset:
        """The dataset the loader's workers run: `dataset` itself (a bucket's fetches the next batch ahead;
        `batches(epoch)` gives this rank's batches of dataset indices)."""
        return dataset


LOCAL = Storage()


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
