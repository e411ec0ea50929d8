"""`--cache ram`: decoded, resized uint8 images in one flat buffer, after checking that they fit."""

from __future__ import annotations

import dataclasses
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.data.images.load import load_resized, read_failure, resized_shapes
from detect.data.records import RecordTable
from detect.errors import UserError

LOGGER = logging.getLogger(__name__)

# Leave this share of the available memory to the model, the workers and the OS (a choice, not a measurement).
MEMORY_SHARE = 0.7


def available_memory() -> int:
    """Bytes the kernel says a new allocation can get (MemAvailable), else free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass(frozen=True, eq=False)
class RamImages:
    """N images in one uint8 buffer: image i is buffer[offsets[i]:][:prod(shapes[i])] as (h, w, 3). One array, not
    N: forked workers reading it never copy its pages (no per-image reference counts to write)."""

    buffer: np.ndarray
    offsets: np.ndarray
    shapes: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: int) -> np.ndarray:
        start, shape = int(self.offsets[index]), tuple(int(side) for side in self.shapes[index])
        return self.buffer[start:start + shape[0] * shape[1] * shape[2]].reshape(shape)

    def take(self, indices: np.ndarray) -> RamImages:
        """The images at `indices`, in that order (the buffer is shared, not copied)."""
        return RamImages(self.buffer, self.offsets[indices], self.shapes[indices])


def _load(path: str, imgsz: int, augment: bool) -> np.ndarray:
    """One image for the cache; an unreadable one ends the start-up with one line naming it."""
    try:
        return load_resized(Path(path), imgsz, augment)
    except Exception as error:  # noqa: BLE001 (a decoder may raise anything; the user gets one line)
        raise UserError(f"--cache ram: {read_failure(path, error)}") from None


def check_memory(records: RecordTable, imgsz: int) -> tuple[np.ndarray, np.ndarray]:
    """(heights, widths) of the resized images if they fit in memory; else a UserError saying what they need."""
    heights, widths = resized_shapes(records.heights, records.widths, imgsz)
    needed, available = int((heights * widths * 3).sum()), available_memory()
    if needed > MEMORY_SHARE * available:
        raise UserError(f"--cache ram needs {needed / 2**30:.1f} GiB for {len(records)} images at {imgsz}, "
                        f"but only {available / 2**30:.1f} GiB is available; use --cache disk or no --cache")
    return heights, widths


def cache_images(records: RecordTable, imgsz: int, augment: bool) -> RamImages:
    """Decode and resize every image into memory; refuses in one line, saying what it needs, when they would not fit."""
    heights, widths = check_memory(records, imgsz)
    sizes = heights * widths * 3
    needed = int(sizes.sum())
    offsets = np.zeros(len(records), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    images = RamImages(np.empty(needed, np.uint8), offsets, np.stack([heights, widths, np.full_like(heights, 3)], 1))

    def fill(index: int) -> None:
        images[index][...] = _load(os.fsdecode(records.paths[index]), imgsz, augment)

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        list(pool.map(fill, range(len(records))))
    LOGGER.info("cached %d images in RAM (%.2f GiB)", len(records), needed / 2**30)
    return images
