"""CPU augmentations on uint8 BGR images with (n, 5) pixel labels [cls, x1, y1, x2, y2]: warp, HSV, flips, mixup."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from detect.data.images.letterbox import PAD_VALUE
from detect.ops.boxes import clip_boxes


@dataclasses.dataclass(frozen=True)
class Warp:
    """The ranges of a random perspective/affine warp: the hyp's degrees, translate, scale, shear, perspective."""

    degrees: float = 0.0
    translate: float = 0.0
    scale: float = 0.0
    shear: float = 0.0
    perspective: float = 0.0


def warp_matrix(rng: np.random.Generator, height: int, width: int, border: tuple[int, int],
                warp: Warp) -> tuple[np.ndarray, float, tuple[int, int]]:
    """(3x3 matrix, scale, (out_h, out_w)) for a random perspective/affine warp about the image centre."""
    degrees, translate, scale, shear, perspective = dataclasses.astuple(warp)
    out_height, out_width = height + 2 * border[0], width + 2 * border[1]
    centre = np.eye(3)
    centre[0, 2], centre[1, 2] = -width / 2, -height / 2
    projective = np.eye(3)
    projective[2, 0], projective[2, 1] = rng.uniform(-perspective, perspective, size=2)
    rotation = np.eye(3)
    angle, factor = rng.uniform(-degrees, degrees), rng.uniform(1 - scale, 1 + scale)
    rotation[:2] = cv2.getRotationMatrix2D(angle=angle, center=(0, 0), scale=factor)
    shearing = np.eye(3)
    shearing[0, 1], shearing[1, 0] = np.tan(np.radians(rng.uniform(-shear, shear, size=2)))
    translation = np.eye(3)
    translation[0, 2] = rng.uniform(0.5 - translate, 0.5 + translate) * out_width
    translation[1, 2] = rng.uniform(0.5 - translate, 0.5 + translate) * out_height
    return translation @ shearing @ rotation @ projective @ centre, factor, (out_height, out_width)


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


def warp_boxes(labels: np.ndarray, matrix: np.ndarray, out_shape: tuple[int, int], factor: float) -> np.ndarray:
    """Warp (n, 5) pixel labels by their 4 corners; clip to the output; drop tiny or degenerate boxes."""
    if len(labels) == 0:
        return labels
    corners = labels[:, [1, 2, 3, 4, 1, 4, 3, 2]].reshape(-1, 2)  # x1y1, x2y2, x1y2, x2y1
    points = np.concatenate([corners, np.ones((len(corners), 1))], axis=1) @ matrix.T
    points = points[:, :2] / points[:, 2:3] if matrix[2, 0] or matrix[2, 1] else points[:, :2]
    points = points.reshape(-1, 8)
    xs, ys = points[:, 0::2], points[:, 1::2]
    boxes = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], axis=1)
    boxes = clip_boxes(boxes, out_shape[0], out_shape[1])
    keep = keep_after_warp(labels[:, 1:5] * factor, boxes)
    return np.concatenate([labels[keep, :1], boxes[keep]], axis=1).astype(np.float32)


def random_warp(image: np.ndarray, labels: np.ndarray, rng: np.random.Generator, warp: Warp,
                border: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """Random perspective/affine warp within `warp`'s ranges; output grows by 2*border."""
    height, width = image.shape[:2]
    matrix, factor, out_shape = warp_matrix(rng, height, width, border, warp)
    if border != (0, 0) or not np.allclose(matrix, np.eye(3)):
        grey = (PAD_VALUE,) * 3
        if warp.perspective:
            image = cv2.warpPerspective(image, matrix, dsize=(out_shape[1], out_shape[0]), borderValue=grey)
        else:
            image = cv2.warpAffine(image, matrix[:2], dsize=(out_shape[1], out_shape[0]), borderValue=grey)
    return image, warp_boxes(labels, matrix, out_shape, factor)


def hsv_jitter(image: np.ndarray, rng: np.random.Generator, hue: float, saturation: float, value: float) -> np.ndarray:
    """Random HSV gains in [1-g, 1+g] (hyp hsv_h, hsv_s, hsv_v), through one 3-channel lookup table; a new image."""
    if not (hue or saturation or value):
        return image
    gains = rng.uniform(-1, 1, 3) * [hue, saturation, value] + 1
    levels = np.arange(256, dtype=np.float64)
    table = np.stack([(levels * gains[0]) % 180, np.clip(levels * gains[1], 0, 255),
                      np.clip(levels * gains[2], 0, 255)], axis=-1).astype(np.uint8)
    hsv = cv2.LUT(cv2.cvtColor(image, cv2.COLOR_BGR2HSV), table[:, None, :])
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR, dst=hsv)


def flip(image: np.ndarray, labels: np.ndarray, horizontal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mirror left-right (horizontal) or up-down, with its (n, 5) pixel labels."""
    height, width = image.shape[:2]
    labels = labels.copy()
    if horizontal:
        labels[:, [1, 3]] = width - labels[:, [3, 1]]
    else:
        labels[:, [2, 4]] = height - labels[:, [4, 2]]
    return cv2.flip(image, 1 if horizontal else 0), labels


def mixup(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray],
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Blend two same-size images with a Beta(32, 32) ratio and keep both label sets (MixUp, Zhang et al. 2017)."""
    ratio = rng.beta(32.0, 32.0)
    image = (first[0].astype(np.float32) * ratio + second[0].astype(np.float32) * (1 - ratio)).astype(np.uint8)
    return image, np.concatenate([first[1], second[1]], axis=0)


def degenerate_free(labels: np.ndarray) -> np.ndarray:
    """Drop rows whose box has no area (after clipping)."""
    return labels[(labels[:, 3] > labels[:, 1]) & (labels[:, 4] > labels[:, 2])] if len(labels) else labels
