"""Checked images and their labels as every later stage sees them: one ImageRecord, or a RecordTable of many."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
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


@dataclasses.dataclass(frozen=True, eq=False)
class RecordTable(Sequence[ImageRecord]):
    """N images as a few flat arrays, a sequence of ImageRecord made on access.

    One Python object per image would cost ~1 KB each and, read by forked DataLoader workers, copy its page into
    every worker (reference counts are writes); these arrays are a dozen objects whatever N is.
    paths (N,) bytes (os.fsencode), image_ids (N,) int64, widths, heights (N,) int32, offsets (N + 1,) int64 into
    rows (M, 5) float32 [class, cx, cy, w, h] normalised and crowd (M,) bool: image i owns rows[offsets[i]:offsets[i + 1]].
    """

    paths: np.ndarray
    image_ids: np.ndarray
    widths: np.ndarray
    heights: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray
    crowd: np.ndarray

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        index = int(index) + (len(self) if index < 0 else 0)
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} of {len(self)}")
        start, stop = self.offsets[index], self.offsets[index + 1]
        rows = self.rows[start:stop]
        return ImageRecord(path=Path(os.fsdecode(self.paths[index])), image_id=int(self.image_ids[index]),
                           width=int(self.widths[index]), height=int(self.heights[index]),
                           classes=rows[:, 0].astype(np.int64), boxes=rows[:, 1:5], crowd=self.crowd[start:stop])

    def __iter__(self) -> Iterator[ImageRecord]:
        return (self[index] for index in range(len(self)))

    def take(self, indices: np.ndarray | Sequence[int]) -> RecordTable:
        """The images at `indices`, in that order (a copy)."""
        indices = np.asarray(indices, np.int64)
        counts = np.diff(self.offsets)[indices]
        offsets = np.zeros(len(indices) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        starts = self.offsets[indices]
        # row r of the result is row starts[i] + (r - offsets[i]) of image i's block
        positions = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1])
        return RecordTable(self.paths[indices], self.image_ids[indices], self.widths[indices], self.heights[indices],
                           offsets, self.rows[positions], self.crowd[positions])

    def single_class(self) -> RecordTable:
        """Every box class 0 (yolov5's --single-cls), a copy."""
        rows = self.rows.copy()
        rows[:, 0] = 0
        return dataclasses.replace(self, rows=rows)

    @classmethod
    def from_records(cls, records: Sequence[ImageRecord]) -> RecordTable:
        """A table of the given records (a RecordTable is returned as it is)."""
        if isinstance(records, RecordTable):
            return records
        offsets = np.zeros(len(records) + 1, np.int64)
        np.cumsum([len(record.classes) for record in records], out=offsets[1:])
        rows = [np.concatenate([np.asarray(record.classes, np.float32).reshape(-1, 1),
                                np.asarray(record.boxes, np.float32).reshape(-1, 4)], axis=1) for record in records]
        crowd = [np.asarray(record.crowd, bool).reshape(-1) for record in records]
        return cls(paths=np.array([os.fsencode(record.path) for record in records], dtype=bytes).reshape(-1),
                   image_ids=np.array([record.image_id for record in records], np.int64).reshape(-1),
                   widths=np.array([record.width for record in records], np.int32).reshape(-1),
                   heights=np.array([record.height for record in records], np.int32).reshape(-1), offsets=offsets,
                   rows=np.concatenate(rows or [np.zeros((0, 5), np.float32)]),
                   crowd=np.concatenate(crowd or [np.zeros(0, bool)]))


def label_path_for(image: str) -> str:
    """The yolov5 rule: the last /images/ folder becomes /labels/, the suffix becomes .txt (strings, not Path
    objects: this runs once per image of a 118k split on every start)."""
    head, separator, tail = image.rpartition(f"{os.sep}images{os.sep}")
    if separator:
        image = f"{head}{os.sep}labels{os.sep}{tail}"
    elif image.startswith(f"images{os.sep}"):
        image = f"labels{os.sep}{image[len('images') + 1:]}"
    stem, dot, suffix = image.rpartition(".")
    return f"{stem}.txt" if dot and os.sep not in suffix else f"{image}.txt"


def assign_image_ids(paths: Sequence[str | Path]) -> np.ndarray:
    """int(stem) when every stem is numeric and unique (COCO), else the index in sorted path order; (N,) int64."""
    names = [str(path).rpartition(os.sep)[2] for path in paths]
    stems = [name.rpartition(".")[0] or name for name in names]  # os.path.splitext's stem, a tenth of its time
    if stems and all(map(str.isdigit, stems)):
        ids = np.array(stems).astype(np.int64)
        if len(np.unique(ids)) == len(ids):
            return ids
    order = sorted(range(len(stems)), key=lambda index: Path(paths[index]))  # Path order, as before: "a/b" < "a-b"
    ids = np.empty(len(stems), np.int64)
    ids[order] = np.arange(len(stems))
    return ids
