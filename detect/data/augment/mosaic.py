"""Mosaic: four images around a random centre on a 2*imgsz canvas, then the random warp back to imgsz."""

from __future__ import annotations

import numpy as np

from detect.data.augment.transforms import Warp, random_warp
from detect.data.images.letterbox import PAD_VALUE
from detect.ops.boxes import clip_boxes, xywhn_to_xyxy

# An image loaded for mosaic: (h, w, 3) uint8 resized to imgsz, and (n, 5) labels [cls, cx, cy, w, h] normalised.
Loaded = tuple[np.ndarray, np.ndarray]


def _place(canvas: np.ndarray, image: np.ndarray, slot: int, centre_x: int, centre_y: int) -> tuple[int, int]:
    """Paste `image` into quadrant `slot` (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right) touching the
    centre; returns the canvas offset of the image's own (0, 0)."""
    height, width = image.shape[:2]
    size_y, size_x = canvas.shape[:2]
    left = centre_x - width if slot in (0, 2) else centre_x
    top = centre_y - height if slot in (0, 1) else centre_y
    x1, y1 = max(left, 0), max(top, 0)
    x2, y2 = min(left + width, size_x), min(top + height, size_y)
    canvas[y1:y2, x1:x2] = image[y1 - top:y2 - top, x1 - left:x2 - left]
    return left, top


def mosaic4(pieces: list[Loaded], imgsz: int, rng: np.random.Generator, warp: Warp) -> tuple[np.ndarray, np.ndarray]:
    """Mosaic of 4 loaded images (in quadrant order) then random warp; returns (imgsz, imgsz, 3) uint8 and
    (n, 5) labels [cls, x1, y1, x2, y2] in pixels."""
    canvas = np.full((2 * imgsz, 2 * imgsz, 3), PAD_VALUE, np.uint8)
    centre_x, centre_y = (int(value) for value in rng.uniform(imgsz / 2, 3 * imgsz / 2, size=2))
    placed = []
    for slot, (image, labels) in enumerate(pieces):
        left, top = _place(canvas, image, slot, centre_x, centre_y)
        height, width = image.shape[:2]
        corners = xywhn_to_xyxy(labels[:, 1:5], width, height, left, top)
        placed.append(np.concatenate([labels[:, :1], corners], axis=1))
    labels = np.concatenate(placed, axis=0).astype(np.float32)
    labels[:, 1:] = clip_boxes(labels[:, 1:], 2 * imgsz, 2 * imgsz)
    border = (-imgsz // 2, -imgsz // 2)  # the warp crops the 2*imgsz canvas back to imgsz
    return random_warp(canvas, labels, rng, warp, border=border)
