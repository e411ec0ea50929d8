"""Pure box math on torch tensors; every function returns new tensors and never mutates its input."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """Convert (..., 4) centre boxes [cx, cy, w, h] to corner boxes [x1, y1, x2, y2], same units."""
    centre, size = boxes[..., :2], boxes[..., 2:4]
    return torch.cat((centre - size / 2, centre + size / 2), dim=-1)


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """Convert (..., 4) corner boxes [x1, y1, x2, y2] to centre boxes [cx, cy, w, h], same units."""
    top_left, bottom_right = boxes[..., :2], boxes[..., 2:4]
    return torch.cat(((top_left + bottom_right) / 2, bottom_right - top_left), dim=-1)


def xyxy_to_coco(boxes: Tensor) -> Tensor:
    """Convert (..., 4) corner boxes [x1, y1, x2, y2] to COCO boxes [x, y, w, h] (top-left corner and size)."""
    top_left, bottom_right = boxes[..., :2], boxes[..., 2:4]
    return torch.cat((top_left, bottom_right - top_left), dim=-1)


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


def clip_boxes(boxes: Tensor, height: float, width: float) -> Tensor:
    """Clip (..., 4) xyxy pixel boxes to an image of the given height and width."""
    x = boxes[..., 0::2].clamp(0, width)
    y = boxes[..., 1::2].clamp(0, height)
    return torch.stack((x[..., 0], y[..., 0], x[..., 1], y[..., 1]), dim=-1)


def bbox_iou(boxes1: Tensor, boxes2: Tensor, *, ciou: bool = False, eps: float = 1e-7) -> Tensor:
    """Element-wise IoU (or CIoU) of (..., 4) xyxy boxes paired one to one, shape (...,).

    CIoU = IoU - rho^2 / c^2 - alpha * v (Zheng et al. 2020, "Distance-IoU Loss", eq. 9-11), where rho is
    the centre distance, c the diagonal of the smallest enclosing box, v the aspect-ratio term.
    """
    x1a, y1a, x2a, y2a = boxes1.unbind(-1)
    x1b, y1b, x2b, y2b = boxes2.unbind(-1)
    width_a, height_a = x2a - x1a, (y2a - y1a) + eps
    width_b, height_b = x2b - x1b, (y2b - y1b) + eps
    inter = (torch.minimum(x2a, x2b) - torch.maximum(x1a, x1b)).clamp(min=0) * (
        torch.minimum(y2a, y2b) - torch.maximum(y1a, y1b)
    ).clamp(min=0)
    union = width_a * height_a + width_b * height_b - inter + eps
    iou = inter / union
    if not ciou:
        return iou
    enclose_width = torch.maximum(x2a, x2b) - torch.minimum(x1a, x1b)
    enclose_height = torch.maximum(y2a, y2b) - torch.minimum(y1a, y1b)
    diagonal_sq = enclose_width**2 + enclose_height**2 + eps
    centre_sq = ((x1b + x2b - x1a - x2a) ** 2 + (y1b + y2b - y1a - y2a) ** 2) / 4
    aspect = (4 / math.pi**2) * (torch.atan(width_b / height_b) - torch.atan(width_a / height_a)) ** 2
    with torch.no_grad():
        # alpha is a trade-off weight, not a term to differentiate through (paper, eq. 11).
        alpha = aspect / (aspect - iou + (1 + eps))
    return iou - (centre_sq / diagonal_sq + aspect * alpha)
