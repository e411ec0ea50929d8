"""Slow, obviously correct NMS used only to check the fast paths."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def iou_one_to_many(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box with (K, 4) xyxy boxes in float64, 0 where the union is empty."""
    width = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = width * height
    area = max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])
    areas = np.clip(others[:, 2] - others[:, 0], 0, None) * np.clip(others[:, 3] - others[:, 1], 0, None)
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def greedy(boxes: np.ndarray, order: list[int], iou_threshold: float, groups: np.ndarray) -> list[int]:
    """Visit boxes in the given order; keep one unless it overlaps a kept box of its group above the threshold."""
    kept: dict[int, list[int]] = {}
    result: list[int] = []
    for index in order:
        same_group = kept.setdefault(int(groups[index]), [])
        if not same_group or iou_one_to_many(boxes[index], boxes[same_group]).max() <= iou_threshold:
            same_group.append(index)
            result.append(index)
    return result


def reference_kernel(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy single-class NMS: walk boxes by score (ties: lower index first), keep one if it overlaps no kept box."""
    order = sorted(range(len(scores)), key=lambda index: -float(scores[index]))
    kept = greedy(boxes.double().numpy(), order, iou_threshold, np.zeros(len(scores), dtype=np.int64))
    return torch.tensor(kept, dtype=torch.int64)


def reference_non_max_suppression(
    prediction: Tensor,
    conf_threshold: float,
    iou_threshold: float,
    *,
    multi_label: bool = True,
    agnostic: bool = False,
    max_candidates: int = 30000,
    max_det: int = 300,
) -> list[np.ndarray]:
    """Whole pipeline without class offsets: per-class greedy NMS on the capped candidate list."""
    outputs = []
    for image in prediction.numpy():
        rows = []
        for box_index, row in enumerate(image):
            if not row[4] > conf_threshold:
                continue
            cx, cy, w, h = (float(v) for v in row[:4])
            corners = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            scores = row[5:] * row[4]  # float32 product, as in torch
            if multi_label and len(scores) > 1:
                chosen = [c for c in range(len(scores)) if scores[c] > conf_threshold]
            else:
                chosen = [int(np.argmax(scores))] if scores.max() > conf_threshold else []
            rows.extend((float(scores[c]), box_index, c, corners) for c in chosen)
        rows.sort(key=lambda item: -item[0])  # stable: ties keep (box, class) order
        rows = rows[:max_candidates]
        boxes = np.array([row[3] for row in rows], dtype=np.float64).reshape(-1, 4)
        groups = np.array([0 if agnostic else row[2] for row in rows], dtype=np.int64)
        kept = [rows[index] for index in greedy(boxes, list(range(len(rows))), iou_threshold, groups)][:max_det]
        outputs.append(np.array([(*k[3], k[0], k[2]) for k in kept], dtype=np.float64).reshape(-1, 6))
    return outputs
