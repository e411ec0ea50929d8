"""One checked image and its labels, as every later stage sees it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = (".bmp", ".dng", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp", ".pfm")


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """An image and its boxes: classes (n,) int64, boxes (n, 4) float32 normalised cx cy w h, crowd (n,) bool."""

    path: Path
    image_id: int
    width: int
    height: int
    classes: np.ndarray
    boxes: np.ndarray
    crowd: np.ndarray

    @property
    def train_boxes(self) -> tuple[np.ndarray, np.ndarray]:
        """(classes, boxes) without crowd boxes: crowd regions are ignored by evaluation, never trained on."""
        keep = ~self.crowd
        return self.classes[keep], self.boxes[keep]


def label_path_for(image: Path) -> Path:
    """The yolov5 rule: the last /images/ folder becomes /labels/, the suffix becomes .txt."""
    parts = list(image.parts)
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] == "images":
            parts[index] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def assign_image_ids(paths: list[Path]) -> list[int]:
    """int(stem) when every stem is numeric and unique (COCO), else the index in sorted path order."""
    stems = [path.stem for path in paths]
    if stems and all(stem.isdigit() for stem in stems) and len({int(stem) for stem in stems}) == len(stems):
        return [int(stem) for stem in stems]
    order = {path: index for index, path in enumerate(sorted(paths))}
    return [order[path] for path in paths]
