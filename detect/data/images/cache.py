"""`--cache`: where training images are kept once decoded and resized (None: decoded on every read)."""

from __future__ import annotations

from pathlib import Path

from detect.data.images.disk_cache import DiskImages, disk_images
from detect.data.images.ram_cache import NodeShare, RamImages, cache_images
from detect.data.records import RecordTable
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.errors import UserError

CACHE_CHOICES = ("ram", "disk")


def build_image_cache(records: RecordTable, imgsz: int | None, cache: str | None, cache_dir: str | Path | None = None,
                      share: NodeShare | None = None, storage: Storage = LOCAL) -> RamImages | DiskImages | None:
    """The store `cache` names for training images (augment resize; imgsz None: as decoded), or None; an unknown name is a UserError.
    `cache_dir`: the folder for disk's .npy files (disk_images); `share`: the node's ranks that fill one RAM buffer;
    `storage`: where the images are read from."""
    if cache is None:
        return None
    if cache not in CACHE_CHOICES:
        raise UserError(f"--cache {cache}: choose one of {', '.join(CACHE_CHOICES)}")
    if cache == "ram":
        return cache_images(records, imgsz, augment=True, share=share, storage=storage)
    return disk_images(records, imgsz, augment=True, cache_dir=cache_dir, storage=storage)
