"""Tiled training's view of a checked split: each image's overlapping windows (ops/windows.py) as records of their
own, labels clipped to each window, nothing written to disk."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from detect.config import UNIT, Bound, ValueOutOfRange, from_mapping
from detect.data.records import RecordTable
from detect.errors import refuse_unknown_keys
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_xywh
from detect.ops.windows import window_count, window_grid

LOGGER = logging.getLogger(__name__)

# A 16,000 px square image at 640 px and overlap 0.2 needs 31 x 31 = 961 windows: the default bound lets such an image
# through and stops a mistaken --tile 32 on it (250,000 windows); --max-windows raises it.
DEFAULT_MAX_WINDOWS = 1024
MAX_WINDOWS_HELP = ("an image that would need more windows (--tile or --slice, at its overlap) is skipped by name "
                    "(predict's API refuses it; the service answers 413)")
OVERLAP = Bound("a number in [0, 0.9]", lambda value: 0 <= value <= 0.9)  # 0.9: ten windows a side for each one
# yolov5's augmentations keep a box cut to at least 10% of its area (box_candidates' area_thr), and so does SAHI's
# slice_coco (min_area_ratio): the same rule for a box cut by a window's edge.
MIN_VISIBLE = 0.1
# Windows without a box that are kept: yolov5 advises 0-10% background images in a dataset.
EMPTY_RATE = 0.1


@dataclasses.dataclass(frozen=True)
class TileSettings:
    """A data yaml's `tile:` (and --tile, --tile-overlap, --max-windows): windows of `size` pixels overlapping by
    `overlap` of it; a box cut to less than `min_visible` of its area is dropped; a window with no box is kept with
    probability `empty_rate` (drawn from the run's seed); an image needing more than `max_windows` is skipped."""

    size: int
    overlap: float = 0.2
    min_visible: float = MIN_VISIBLE
    empty_rate: float = EMPTY_RATE
    max_windows: int = DEFAULT_MAX_WINDOWS

    def __post_init__(self) -> None:
        checks = (("size", 32 <= self.size <= 8192, "an integer in [32, 8192]"),
                  ("overlap", OVERLAP.accept(self.overlap), OVERLAP.what),
                  ("min_visible", UNIT.accept(self.min_visible), UNIT.what),
                  ("empty_rate", UNIT.accept(self.empty_rate), UNIT.what),
                  ("max_windows", self.max_windows >= 1, "an integer >= 1"))
        for key, ok, what in checks:
            if not ok:
                raise ValueOutOfRange(f"key '{key}' must be {what}, got {getattr(self, key)!r}")


YAML_KEYS = ("size", "overlap", "min_visible", "empty_rate")


def parse_tile(value: dict[str, Any], source: str) -> TileSettings:
    """A data yaml's `tile:` mapping ({size, overlap, min_visible, empty_rate}), strictly: an unknown key or a wrong
    type names it and `source`."""
    refuse_unknown_keys(value, YAML_KEYS, f"{source}: tile:")  # max_windows is a flag: a machine's, not the data's
    return from_mapping(TileSettings, value, f"{source}: tile")


@dataclasses.dataclass(frozen=True, eq=False)
class Windows:
    """The windows a split trains on. records: one per window (its image's path and id; width and height the
    window's; label rows clipped and normalised to it); crops (N, 4) int64 [x1, y1, x2, y2] in the image's pixels;
    sources (N,) int64: the window's image in `images` (the split's images that kept a window); skipped: the images
    that would need more than max_windows, as "<path>: <why>"."""

    records: RecordTable
    crops: np.ndarray
    sources: np.ndarray
    images: RecordTable
    skipped: tuple[str, ...]
    empty_found: int
    empty_kept: int


def clip_to_window(boxes: np.ndarray, window: np.ndarray, min_visible: float) -> tuple[np.ndarray, np.ndarray]:
    """(kept (n,) bool, clipped (n, 4) xyxy) for (n, 4) xyxy pixel boxes and a window [x1, y1, x2, y2]: each box cut
    to the window, kept where at least `min_visible` of its area (and a positive width and height) is left."""
    clipped = np.concatenate([np.maximum(boxes[:, :2], window[:2]), np.minimum(boxes[:, 2:], window[2:])], axis=1)
    sides = clipped[:, 2:] - clipped[:, :2]
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    kept = (sides > 0).all(axis=1) & (sides.prod(axis=1) >= min_visible * area)
    return kept, clipped


def _image_windows(table: RecordTable, index: int, settings: TileSettings, rng: np.random.Generator,
                   counts: list[int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(window, rows normalised to it, crowd) of each kept window of image `index`; counts[0:2] += (empty windows
    found, kept)."""
    width, height = int(table.widths[index]), int(table.heights[index])
    start, stop = table.offsets[index], table.offsets[index + 1]
    rows, crowd = table.rows[start:stop], table.crowd[start:stop]
    boxes = xywhn_to_xyxy(rows[:, 1:5].astype(np.float64), width, height)
    kept_windows = []
    for window in window_grid(height, width, settings.size, settings.overlap):
        kept, clipped = clip_to_window(boxes, window.astype(np.float64), settings.min_visible)
        if not (kept & ~crowd).any():  # no box to learn from: a background window
            counts[0] += 1
            if rng.random() >= settings.empty_rate:
                continue
            counts[1] += 1
        sides = (window[2:] - window[:2]).astype(np.float64)
        local = xyxy_to_xywh((clipped[kept] - np.tile(window[:2], 2)) / np.tile(sides, 2))
        kept_windows.append((window, np.concatenate([rows[kept, :1], local], axis=1).astype(np.float32),
                             crowd[kept]))
    return kept_windows


def expand_windows(table: RecordTable, settings: TileSettings, seed: int) -> Windows:
    """Every image of `table` as its windows (the same list on every rank: the empty windows kept are drawn from
    `seed`, image by image in the table's order)."""
    rng = np.random.default_rng([seed, 0x711E])
    counts, skipped, images, parts = [0, 0], [], [], []
    for index in range(len(table)):
        height, width = int(table.heights[index]), int(table.widths[index])
        needed = window_count(height, width, settings.size, settings.overlap)
        if needed > settings.max_windows:
            skipped.append(f"{table[index].path}: {width}x{height} needs {needed} windows of {settings.size} px at "
                           f"overlap {settings.overlap:g}, more than --max-windows {settings.max_windows}")
            continue
        found = _image_windows(table, index, settings, rng, counts)
        if found:
            parts.append((len(images), found))
            images.append(index)
    originals = table.take(images)
    windows = [window for _, found in parts for window, _, _ in found]
    sources = np.array([source for source, found in parts for _ in found], np.int64)
    offsets = np.zeros(len(windows) + 1, np.int64)
    np.cumsum([len(rows) for _, found in parts for _, rows, _ in found], out=offsets[1:])
    crops = np.array(windows, np.int64).reshape(-1, 4)
    records = RecordTable(
        paths=originals.paths[sources], image_ids=originals.image_ids[sources],
        widths=(crops[:, 2] - crops[:, 0]).astype(np.int32), heights=(crops[:, 3] - crops[:, 1]).astype(np.int32),
        offsets=offsets, rows=np.concatenate([rows for _, found in parts for _, rows, _ in found] or
                                             [np.zeros((0, 5), np.float32)]),
        crowd=np.concatenate([crowd for _, found in parts for _, _, crowd in found] or [np.zeros(0, bool)]))
    return Windows(records, crops, sources, originals, tuple(skipped), counts[0], counts[1])


def log_windows(windows: Windows, settings: TileSettings) -> None:
    """One line for the windows, and one for each image skipped (named)."""
    LOGGER.info("tiles: %d windows of %d images (%d px, overlap %g): %d with boxes, %d of %d empty ones kept (rate "
                "%g)%s", len(windows.records), len(windows.images), settings.size, settings.overlap,
                len(windows.records) - windows.empty_kept, windows.empty_kept, windows.empty_found,
                settings.empty_rate, f"; {len(windows.skipped)} images skipped" if windows.skipped else "")
    for line in windows.skipped:
        LOGGER.warning("tiles: skipped %s", line)
