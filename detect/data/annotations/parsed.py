"""What a label-file reader gives: every box of the file in flat arrays, its class by the file's own names."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class ParsedLabels:
    """N annotated images and M boxes. An image is matched to a file of the images folder by the first of its
    `candidates` (file names; one without a suffix is a stem) found there. Box j belongs to image owners[j], has class
    class_names[labels[j]], corners boxes[j] (x1 y1 x2 y2, fractions of the image's width and height) and crowd[j]
    (left out of training, kept in the ground truth). `counts` and `details` are what the reader left out, by name."""

    candidates: list[tuple[str, ...]]
    owners: np.ndarray
    labels: np.ndarray
    boxes: np.ndarray
    crowd: np.ndarray
    class_names: list[str]
    files: list[Path]
    counts: collections.Counter
    details: list[str]
    image_files: list[Path] | None = None  # the file that annotates each image, where not files[0]
    image_ids: list[int] | None = None  # COCO: the json's image ids
    category_ids: list[int] | None = None  # COCO: the category id of each of class_names

    def file_of(self, image: int) -> Path:
        """The file that annotates image `image`."""
        return self.image_files[image] if self.image_files else self.files[0]


class Collector:
    """Gathers images and boxes one at a time, for the readers of xml and Label Studio files."""

    def __init__(self, files: list[Path], class_names: list[str] | None = None) -> None:
        self.files, self.candidates, self.image_files = files, [], []
        self.class_names = list(class_names or [])
        self._index = {name: index for index, name in enumerate(self.class_names)}
        self._owners, self._labels, self._boxes, self._crowd = [], [], [], []
        self.counts: collections.Counter = collections.Counter()
        self.details: list[str] = []

    def image(self, *candidates: str, file: Path | None = None) -> int:
        """Start an image (annotated in `file`, default the first file); its index."""
        self.candidates.append(tuple(name for name in candidates if name))
        self.image_files.append(file or self.files[0])
        return len(self.candidates) - 1

    def box(self, image: int, name: str, corners: tuple[float, float, float, float], crowd: bool = False) -> None:
        """Add a box (x1 y1 x2 y2 fractions of the image) of class `name` to image `image`."""
        if name not in self._index:
            self._index[name] = len(self.class_names)
            self.class_names.append(name)
        self._owners.append(image)
        self._labels.append(self._index[name])
        self._boxes.append(corners)
        self._crowd.append(crowd)

    def left_out(self, problem: str, detail: str) -> None:
        """Count `problem` and keep its detail line."""
        self.counts[problem] += 1
        self.details.append(detail)

    def result(self, sort_names: bool) -> ParsedLabels:
        """The collected labels; with `sort_names` the class names (those the file does not list first) sorted."""
        names, labels = self.class_names, np.array(self._labels, np.int64)
        if sort_names:
            names = sorted(names)
            labels = np.array([names.index(name) for name in self.class_names], np.int64)[labels] if len(labels) else labels
        return ParsedLabels(candidates=self.candidates, owners=np.array(self._owners, np.int64), labels=labels,
                            boxes=np.array(self._boxes, np.float64).reshape(-1, 4), crowd=np.array(self._crowd, bool),
                            class_names=names, files=self.files, counts=self.counts, details=self.details,
                            image_files=self.image_files)
