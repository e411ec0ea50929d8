"""The pixels of tiled training's windows: each cropped from its image as it is read, the image from --cache (at full
resolution: RAM, or a mapped .npy) or decoded for that one window."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from detect.data.images.disk_cache import DiskImages
from detect.data.images.load import read_image, resize_to_imgsz
from detect.data.images.ram_cache import RamImages
from detect.data.storage.interface import Storage
from detect.data.storage.local import LOCAL
from detect.data.tiles.windows import Windows


@dataclasses.dataclass(frozen=True, eq=False)
class WindowImages:
    """Window i's pixels: crops[i] of image sources[i] (paths (I,) bytes; `images` the full-resolution --cache store
    of those images, or None: decoded on every read), resized so the long side is imgsz (as a training image is)."""

    paths: np.ndarray
    crops: np.ndarray
    sources: np.ndarray
    imgsz: int
    images: RamImages | DiskImages | None = None
    storage: Storage = LOCAL

    @classmethod
    def of(cls, windows: Windows, imgsz: int, images: RamImages | DiskImages | None,
           storage: Storage = LOCAL) -> WindowImages:
        """The store of `windows`, reading their images from `images` (None: decoded)."""
        return cls(windows.images.paths, windows.crops, windows.sources, imgsz, images, storage)

    def __len__(self) -> int:
        return len(self.crops)

    def __getitem__(self, index: int) -> np.ndarray:
        source = int(self.sources[index])
        if self.images is not None:
            image = self.images[source]
        else:
            image = read_image(Path(os.fsdecode(self.paths[source])), self.storage)
        left, top, right, bottom = (int(value) for value in self.crops[index])
        # a copy: a view would keep the whole decoded image alive, and a mapped .npy's rows are read here
        return resize_to_imgsz(np.ascontiguousarray(image[top:bottom, left:right]), self.imgsz, augment=True)

    def take(self, indices: np.ndarray) -> WindowImages:
        """The windows at `indices`, in that order (the images are shared)."""
        return dataclasses.replace(self, crops=self.crops[indices], sources=self.sources[indices])
