"""Pure box math. Conversions take numpy arrays or torch tensors and return the same kind; nothing is mutated.

Formats: xyxy = corners [x1, y1, x2, y2]; xywh = centre and size [cx, cy, w, h]; ltwh = COCO's top-left corner
and size [x, y, w, h]; a trailing n (xywhn) means normalised by the image's width and height.
"""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

Boxes = TypeVar("Boxes", np.ndarray, Tensor)


def _stack(columns: list, like: Boxes) -> Boxes:
    """Stack (...,) columns into (..., 4) of the same kind as `like`."""
    if isinstance(like, Tensor):
        return torch.stack(columns, dim=-1)
    return np.stack(columns, axis=-1)


def xywh_to_xyxy(boxes: Boxes) -> Boxes:
    """(..., 4) xywh -> (..., 4) xyxy, same units."""
    cx, cy, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return _stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], boxes)


def xyxy_to_xywh(boxes: Boxes) -> Boxes:
    """(..., 4) xyxy -> (..., 4) xywh, same units."""
    x1, y1, x2, y2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return _stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], boxes)


def xyxy_to_ltwh(boxes: Boxes) -> Boxes:
    """(..., 4) xyxy -> (..., 4) COCO ltwh [x, y, w, h], same units."""
    x1, y1, x2, y2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return _stack([x1, y1, x2 - x1, y2 - y1], boxes)


def ltwh_to_xyxy(boxes: Boxes) -> Boxes:
    """(..., 4) COCO ltwh [x, y, w, h] -> (..., 4) xyxy, same units."""
    x, y, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return _stack([x, y, x + w, y + h], boxes)


def xywhn_to_xyxy(boxes: Boxes, width: float, height: float, pad_x: float = 0.0, pad_y: float = 0.0) -> Boxes:
    """(..., 4) normalised xywh -> (..., 4) xyxy pixels of a width x height image placed at (pad_x, pad_y)."""
    corners = xywh_to_xyxy(boxes)
    return _stack([corners[..., 0] * width + pad_x, corners[..., 1] * height + pad_y,
                   corners[..., 2] * width + pad_x, corners[..., 3] * height + pad_y], boxes)


def xyxy_to_xywhn(boxes: Boxes, width: float, height: float) -> Boxes:
    """(..., 4) xyxy pixels -> (..., 4) xywh normalised by a width x height image."""
    centre = xyxy_to_xywh(boxes)
    return _stack([centre[..., 0] / width, centre[..., 1] / height, centre[..., 2] / width, centre[..., 3] / height],
                  boxes)


def clip_boxes(boxes: Boxes, height: float, width: float) -> Boxes:
    """(..., 4) xyxy pixels clipped to [0, width] x [0, height]."""
    clip = (lambda v, hi: v.clamp(0, hi)) if isinstance(boxes, Tensor) else (lambda v, hi: v.clip(0, hi))
    return _stack([clip(boxes[..., 0], width), clip(boxes[..., 1], height),
                   clip(boxes[..., 2], width), clip(boxes[..., 3], height)], boxes)


def box_area(boxes: Tensor) -> Tensor:
    """Area of (..., 4) xyxy boxes, shape (...,); degenerate boxes give 0."""
    size = (boxes[..., 2:4] - boxes[..., :2]).clamp(min=0)
    return size[..., 0] * size[..., 1]


def box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 0.0) -> Tensor:
    """Pairwise IoU of (N, 4) and (M, 4) xyxy boxes, shape (N, M); pairs with zero union give 0."""
    top_left = torch.maximum(boxes1[:, None, :2], boxes2[None, :, :2])
    bottom_right = torch.minimum(boxes1[:, None, 2:4], boxes2[None, :, 2:4])
    inter_size = (bottom_right - top_left).clamp(min=0)
    inter = inter_size[..., 0] * inter_size[..., 1]
    union = box_area(boxes1)[:, None] + box_area(boxes2)[None, :] - inter
    iou = inter / (union + eps)
    return torch.where(union > 0, iou, torch.zeros_like(iou))


def _extents(centre1: Tensor, size1: Tensor, centre2: Tensor, size2: Tensor) -> tuple[Tensor, Tensor]:
    """Overlap (0 when apart) and enclosing lengths of paired 1-D intervals given by centre and size."""
    low1, high1 = centre1 - size1 / 2, centre1 + size1 / 2
    low2, high2 = centre2 - size2 / 2, centre2 + size2 / 2
    overlap = (torch.minimum(high1, high2) - torch.maximum(low1, low2)).clamp(min=0)
    return overlap, torch.maximum(high1, high2) - torch.minimum(low1, low2)


def ciou_paired(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Complete IoU of (..., 4) xywh boxes paired one to one, shape (...,); any units, same for both.

    CIoU = IoU - rho^2 / c^2 - alpha * v (Zheng et al. 2020, "Distance-IoU Loss", eq. 9-11): rho is the centre
    distance, c the diagonal of the smallest enclosing box, v the aspect-ratio term. eps sits where yolov5's loss
    puts it for xywh boxes (union, c^2, alpha's denominator; none on w or h), so a zero-size box gives NaN as there.
    """
    # One tensor per coordinate: (..., 2) slices would make every op loop over pairs, several times slower on CPU.
    x1, y1, w1, h1 = boxes1.unbind(-1)
    x2, y2, w2, h2 = boxes2.unbind(-1)
    overlap_x, enclosing_x = _extents(x1, w1, x2, w2)
    overlap_y, enclosing_y = _extents(y1, h1, y2, h2)
    inter = overlap_x * overlap_y
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    diagonal_sq = enclosing_x**2 + enclosing_y**2 + eps
    centre_sq = (x2 - x1) ** 2 + (y2 - y1) ** 2
    aspect = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():
        # alpha is a trade-off weight, not a term to differentiate through (paper, eq. 11).
        alpha = aspect / (aspect - iou + (1 + eps))
    return iou - (centre_sq / diagonal_sq + aspect * alpha)
