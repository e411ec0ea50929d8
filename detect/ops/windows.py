"""Overlapping square windows over a large image: where tiled training crops and sliced inference looks."""

from __future__ import annotations

import math

import numpy as np


def window_starts(length: int, size: int, overlap: float) -> np.ndarray:
    """(n,) int64 offsets of windows of `size` along a side of `length`, neighbours overlapping by at least `overlap`
    of `size`: evenly spread from 0 to the far edge, the last one flush with it (shifted inside the image, never
    padded past it); one at 0 when the side fits in a window."""
    if length <= size:
        return np.zeros(1, np.int64)
    step = max(1, math.floor(size * (1 - overlap)))
    count = math.ceil((length - size) / step) + 1
    return np.round(np.linspace(0, length - size, count)).astype(np.int64)


def window_count(height: int, width: int, size: int, overlap: float) -> int:
    """How many windows window_grid gives an image of (height, width), counted without making them."""
    return len(window_starts(height, size, overlap)) * len(window_starts(width, size, overlap))


def window_grid(height: int, width: int, size: int, overlap: float) -> np.ndarray:
    """(n, 4) int64 windows [x1, y1, x2, y2] in the image's pixels, row by row; each is size x size, except that a
    side shorter than `size` is covered whole."""
    left, top = np.meshgrid(window_starts(width, size, overlap), window_starts(height, size, overlap))
    left, top = left.reshape(-1), top.reshape(-1)
    return np.stack([left, top, np.minimum(left + size, width), np.minimum(top + size, height)], axis=1)
