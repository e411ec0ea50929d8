"""`--cache disk`: each image decoded and resized once into a .npy beside it, read from there on every later use."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from detect.data.images.load import load_resized, resized_shapes
from detect.data.records import RecordTable
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)


def npy_path(image: str, imgsz: int) -> str:
    """<image file>.<imgsz>.npy beside the image: one per size, and a.jpg and a.png never share one."""
    return f"{image}.{imgsz}.npy"


@dataclasses.dataclass(frozen=True, eq=False)
class DiskImages:
    """Images by index, from their .npy (written on the first read, reused across runs). A .npy older than its image
    or of the wrong shape is stale and rewritten; where it cannot be written the decoded image is used as it is.

    paths (N,) bytes, shapes (N, 2) int64 (h, w) after the resize to imgsz.
    """

    paths: np.ndarray
    shapes: np.ndarray
    imgsz: int
    augment: bool

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        image = os.fsdecode(self.paths[index])
        cached, shape = npy_path(image, self.imgsz), (*(int(side) for side in self.shapes[index]), 3)
        try:
            if os.stat(cached).st_mtime_ns >= os.stat(image).st_mtime_ns:
                stored = np.load(cached, allow_pickle=False)
                if stored.shape == shape and stored.dtype == np.uint8:
                    return stored
        except (OSError, ValueError):  # missing, cut short or not a .npy: rebuilt below
            pass
        decoded = load_resized(Path(image), self.imgsz, self.augment)
        temporary = f"{cached}.{os.getpid()}.tmp"  # atomic: ranks and workers may write the same image at once
        try:
            with open(temporary, "wb") as handle:
                np.save(handle, decoded, allow_pickle=False)
            os.replace(temporary, cached)
        except OSError as error:
            LOGGER.debug("%s: cannot write (%s), using the decoded image", cached, error)
            Path(temporary).unlink(missing_ok=True)
        return decoded

    def take(self, indices: np.ndarray) -> DiskImages:
        """The images at `indices`, in that order."""
        return dataclasses.replace(self, paths=self.paths[indices], shapes=self.shapes[indices])


def _written_bytes(paths: np.ndarray, imgsz: int) -> int:
    """Bytes of the .npy files already there."""
    total = 0
    for path in paths:
        try:
            total += os.stat(npy_path(os.fsdecode(path), imgsz)).st_size
        except OSError:
            pass
    return total


def disk_images(records: RecordTable, imgsz: int, augment: bool) -> DiskImages:
    """The .npy store of `records` at `imgsz`; one UserError when the disk cannot hold it, a warning when the first
    image's folder is read-only."""
    folder = os.path.dirname(os.fsdecode(records.paths[0])) or "."
    heights, widths = resized_shapes(records.heights, records.widths, imgsz)
    needed, free = int((heights * widths * 3).sum()), shutil.disk_usage(folder).free
    if needed > free and needed - _written_bytes(records.paths, imgsz) > free:  # stat every .npy only when short
        raise UserError(f"--cache disk needs {needed / 2**30:.1f} GiB beside the {len(records)} images at {imgsz}, "
                        f"but only {free / 2**30:.1f} GiB is free there; free some or run without --cache")
    if not os.access(folder, os.W_OK):
        LOGGER.warning("--cache disk: %s is not writable, images are decoded on every read", folder)
    return DiskImages(records.paths, np.stack([heights, widths], 1), imgsz, augment)
