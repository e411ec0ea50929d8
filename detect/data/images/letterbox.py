"""Letterbox (fit, centre, pad with 114 grey), rectangular val batch shapes, and the exact inverse mapping."""

from __future__ import annotations

import dataclasses
import math

import cv2
import numpy as np
import torch

from detect.ops.boxes import clip_boxes

PAD_VALUE = 114  # grey (docs/yolov5.md, "Letterbox")


@dataclasses.dataclass(frozen=True)
class LetterboxInfo:
    """How an original image became a network input: original (h, w), gain (input px per original px), pad (x, y)."""

    original: tuple[int, int]
    gain: float
    pad: tuple[float, float]


def fitted_size(height: int, width: int, ratio: float) -> tuple[int, int]:
    """(h, w) of an image scaled by `ratio`, each side rounded and at least 1 pixel: a 20000x10 image fitted into 640
    keeps a row of pixels where rounding alone gives 0 (and cv2.resize fails)."""
    return max(1, round(height * ratio)), max(1, round(width * ratio))


def letterbox(image: np.ndarray, shape: tuple[int, int], scale_up: bool = False) -> tuple[np.ndarray, float, tuple[float, float]]:
    """Fit `image` into (h, w) `shape` keeping aspect, centred, padded with 114; returns (image, ratio, (pad_x, pad_y)).

    pad is the float half-padding; the image is placed at its rounded value (round(pad - 0.1)), as yolov5 does.
    """
    height, width = image.shape[:2]
    ratio = min(shape[0] / height, shape[1] / width)
    if not scale_up:
        ratio = min(ratio, 1.0)
    new_height, new_width = fitted_size(height, width, ratio)
    pad_x, pad_y = (shape[1] - new_width) / 2, (shape[0] - new_height) / 2
    if (new_width, new_height) != (width, height):
        image = cv2.resize(image, (new_width, new_height), interpolation=cv2.INTER_LINEAR)
    top, bottom = round(pad_y - 0.1), round(pad_y + 0.1)
    left, right = round(pad_x - 0.1), round(pad_x + 0.1)
    image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3)
    return image, ratio, (pad_x, pad_y)


def rect_batch_shapes(heights: np.ndarray, widths: np.ndarray, batch_size: int, imgsz: int, stride: int = 32,
                      pad: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """(order, shapes): image order sorted by aspect h/w, and per-batch (h, w) input shapes
    (docs/yolov5.md, "Rect batches")."""
    aspect = heights / widths
    # numpy's default (unstable) sort, as yolov5: ties in aspect then land in the same batches as there, and
    # yolov5n on coco128 gives the reference detections (coco_eval_reference/yolov5n_coco128).
    order = np.argsort(aspect)
    aspect = aspect[order]
    count = math.ceil(len(order) / batch_size)
    shapes = np.ones((count, 2))
    for batch in range(count):
        chunk = aspect[batch * batch_size:(batch + 1) * batch_size]
        smallest, largest = chunk.min(), chunk.max()
        if largest < 1:
            shapes[batch] = [largest, 1]
        elif smallest > 1:
            shapes[batch] = [1, 1 / smallest]
    return order, (np.ceil(shapes * imgsz / stride + pad).astype(int) * stride)


def boxes_to_original(boxes: torch.Tensor, info: LetterboxInfo) -> torch.Tensor:
    """(n, 4) xyxy pixels in the letterboxed input -> (n, 4) xyxy pixels in the original image, clipped."""
    pad = boxes.new_tensor([info.pad[0], info.pad[1], info.pad[0], info.pad[1]])
    return clip_boxes((boxes - pad) / info.gain, info.original[0], info.original[1])
