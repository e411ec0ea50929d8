"""`--cache disk`: each image decoded and resized once into a .npy beside it (or in a cache folder when the images'
folder is read-only), read from there on every later use."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from detect.atomic_file import make_folder, replacing
from detect.data.images.load import load_resized, resized_shapes
from detect.data.records import RecordTable
from detect.data.storage.cache_places import cache_root, folder_writable, relocated
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)


def npy_path(image: str, imgsz: int | None, root: str | None = None) -> str:
    """<image file>.<imgsz>.npy beside the image (one per size, and a.jpg and a.png never share one; imgsz None:
    .full.npy, the image as decoded); with a cache `root`, in its folder for the image's folder (storage/cache_places.py,
    relocated: <folder name>-<hash>)."""
    name = f"{image}.{'full' if imgsz is None else imgsz}.npy"
    if root is None:
        return name
    folder, name = os.path.split(name)
    return os.path.join(relocated(Path(folder), Path(root)), name)


@dataclasses.dataclass(frozen=True, eq=False)
class DiskImages:
    """Images by index, from their .npy (written on the first read, reused across runs). A .npy older than its image
    or of the wrong shape is stale and rewritten; where it cannot be written the decoded image is used as it is.

    paths (N,) bytes, shapes (N, 2) int64 (h, w) after the resize to imgsz; root: the cache folder (None: beside).
    At full resolution (imgsz None, tiles) a .npy is mapped, not read: a window's crop reads only its rows.
    """

    paths: np.ndarray
    shapes: np.ndarray
    imgsz: int | None
    augment: bool
    root: str | None = None
    storage: Storage = LOCAL

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        image = os.fsdecode(self.paths[index])
        cached, shape = npy_path(image, self.imgsz, self.root), (*(int(side) for side in self.shapes[index]), 3)
        try:
            if os.stat(cached).st_mtime_ns >= os.stat(image).st_mtime_ns:
                stored = np.load(cached, mmap_mode="r" if self.imgsz is None else None, allow_pickle=False)
                if stored.shape == shape and stored.dtype == np.uint8:
                    return stored
        except Exception as error:  # noqa: BLE001 (missing, cut short, not a .npy: numpy's parser fails in any way)
            LOGGER.debug("%s: rebuilt (%s)", cached, error)
        decoded = load_resized(Path(image), self.imgsz, self.augment, self.storage)
        try:
            # atomic: ranks and workers may write the same image at once; beside the image, inside a source folder
            with replacing(cached, cache=True) as temporary, open(temporary, "wb") as handle:
                np.save(handle, decoded, allow_pickle=False)
        except OSError as error:
            LOGGER.debug("%s: cannot write (%s), using the decoded image", cached, error)
        return decoded

    def take(self, indices: np.ndarray) -> DiskImages:
        """The images at `indices`, in that order."""
        return dataclasses.replace(self, paths=self.paths[indices], shapes=self.shapes[indices])


def _written_bytes(paths: np.ndarray, imgsz: int | None, root: str | None) -> int:
    """Bytes of the .npy files already there."""
    total = 0
    for path in paths:
        try:
            total += os.stat(npy_path(os.fsdecode(path), imgsz, root)).st_size
        except OSError:
            pass
    return total


def disk_images(records: RecordTable, imgsz: int | None, augment: bool, cache_dir: str | Path | None = None,
                storage: Storage = LOCAL) -> DiskImages:
    """The .npy store of `records` at `imgsz`: beside the images, or in a cache folder when `cache_dir`
    (--cache-dir) or $DETECT_CACHE_DIR names one or the first image's folder is read-only (storage/cache_places.py,
    cache_root);
    one UserError when its disk cannot hold them, a warning when it cannot be written."""
    beside = Path(os.fsdecode(records.paths[0])).parent
    root = cache_root(beside, cache_dir)
    folder = beside if root is None else root
    with contextlib.suppress(OSError):  # a folder that cannot be made is named by the warning below
        make_folder(folder, cache=True)
    heights, widths = resized_shapes(records.heights, records.widths, imgsz)
    stored = None if root is None else str(root)
    if not folder_writable(folder):
        LOGGER.warning("--cache disk: %s is not writable, images are decoded on every read", folder)
    else:
        needed, free = int((heights * widths * 3).sum()), shutil.disk_usage(folder).free
        if needed > free and needed - _written_bytes(records.paths, imgsz, stored) > free:  # stat .npy only if short
            size = "full resolution" if imgsz is None else imgsz
            raise UserError(f"--cache disk needs {needed / 2**30:.1f} GiB for the {len(records)} images at {size} "
                            f"in {folder}, but only {free / 2**30:.1f} GiB is free there; free some or run without "
                            "--cache")
        if root is not None:
            LOGGER.info("--cache disk: .npy files in %s", folder)
    return DiskImages(records.paths, np.stack([heights, widths], 1), imgsz, augment, stored, storage)
