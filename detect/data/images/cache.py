"""`--cache`: where training images are kept once decoded and resized (None: decoded on every read)."""

from __future__ import annotations

from detect.data.images.disk_cache import DiskImages, disk_images
from detect.data.images.ram_cache import RamImages, cache_images
from detect.data.records import RecordTable
from detect.errors import UserError

CACHE_CHOICES = ("ram", "disk")


def build_image_cache(records: RecordTable, imgsz: int, cache: str | None) -> RamImages | DiskImages | None:
    """The store `cache` names for training images (augment resize), or None; an unknown name is a UserError."""
    if cache is None:
        return None
    if cache not in CACHE_CHOICES:
        raise UserError(f"--cache {cache}: choose one of {', '.join(CACHE_CHOICES)}")
    return (cache_images if cache == "ram" else disk_images)(records, imgsz, augment=True)
