"""Numpy box conversions for the CPU data pipeline; boxes are (n, 4) float arrays."""

from __future__ import annotations

import numpy as np


def xywhn_to_xyxy(boxes: np.ndarray, width: float, height: float, pad_x: float = 0.0, pad_y: float = 0.0) -> np.ndarray:
    """(n, 4) normalised cx cy w h -> (n, 4) xyxy pixels of a width x height image placed at (pad_x, pad_y)."""
    out = np.empty_like(boxes, dtype=np.float32)
    out[:, 0] = width * (boxes[:, 0] - boxes[:, 2] / 2) + pad_x
    out[:, 1] = height * (boxes[:, 1] - boxes[:, 3] / 2) + pad_y
    out[:, 2] = width * (boxes[:, 0] + boxes[:, 2] / 2) + pad_x
    out[:, 3] = height * (boxes[:, 1] + boxes[:, 3] / 2) + pad_y
    return out


def xyxy_to_xywhn(boxes: np.ndarray, width: float, height: float) -> np.ndarray:
    """(n, 4) xyxy pixels -> (n, 4) cx cy w h normalised by a width x height image."""
    out = np.empty_like(boxes, dtype=np.float32)
    out[:, 0] = (boxes[:, 0] + boxes[:, 2]) / 2 / width
    out[:, 1] = (boxes[:, 1] + boxes[:, 3]) / 2 / height
    out[:, 2] = (boxes[:, 2] - boxes[:, 0]) / width
    out[:, 3] = (boxes[:, 3] - boxes[:, 1]) / height
    return out


def clip_xyxy(boxes: np.ndarray, width: float, height: float) -> np.ndarray:
    """(n, 4) xyxy pixels clipped to [0, width] x [0, height] (a new array)."""
    out = boxes.copy()
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, width)
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, height)
    return out


def keep_after_warp(
    before: np.ndarray, after: np.ndarray, min_side: float = 2.0, max_aspect: float = 100.0, min_area_ratio: float = 0.1
) -> np.ndarray:
    """(n,) bool: boxes still worth training on after a warp (thresholds as in yolov5's box_candidates).

    `before` is the (n, 4) xyxy box scaled by the warp's scale, `after` the warped and clipped box.
    """
    eps = 1e-16
    width_before, height_before = before[:, 2] - before[:, 0], before[:, 3] - before[:, 1]
    width_after, height_after = after[:, 2] - after[:, 0], after[:, 3] - after[:, 1]
    aspect = np.maximum(width_after / (height_after + eps), height_after / (width_after + eps))
    area_ratio = width_after * height_after / (width_before * height_before + eps)
    return (width_after > min_side) & (height_after > min_side) & (area_ratio > min_area_ratio) & (aspect < max_aspect)
