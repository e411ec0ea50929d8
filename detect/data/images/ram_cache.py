"""`--cache ram`: decoded, resized uint8 images held in memory, after checking that they fit."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from detect.data.images.load import load_resized, read_failure, resized_shape
from detect.data.records import ImageRecord
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


def _load(record: ImageRecord, imgsz: int, augment: bool) -> np.ndarray:
    """One image for the cache; an unreadable one ends the start-up with one line naming it."""
    try:
        return load_resized(record.path, imgsz, augment)
    except Exception as error:  # noqa: BLE001 (a decoder may raise anything; the user gets one line)
        raise UserError(f"--cache ram: {read_failure(record.path, error)}") from None


def cache_images(records: list[ImageRecord], imgsz: int, augment: bool) -> list[np.ndarray]:
    """Decode and resize every image into memory; refuses with a UserError when they would not fit."""
    needed = sum(np.prod(resized_shape(record.height, record.width, imgsz)) * 3 for record in records)
    available = available_memory()
    if needed > MEMORY_SHARE * available:
        raise UserError(f"--cache ram needs {needed / 2**30:.1f} GiB for {len(records)} images at {imgsz}, "
                        f"but only {available / 2**30:.1f} GiB is available; run without --cache ram")
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        images = list(pool.map(lambda record: _load(record, imgsz, augment), records))
    LOGGER.info("cached %d images in RAM (%.2f GiB)", len(images), needed / 2**30)
    return images
