"""Non-maximum suppression for YOLO head outputs, with the IoU kernel injected by the caller's backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from detect.ops.boxes import xywh_to_xyxy

# (boxes (N, 4) xyxy, scores (N,), iou_threshold) -> kept indices, int64, in decreasing score order.
# The backend supplies it (Backend.nms: torchvision.ops.nms on CPU and CUDA, the NPU kernel on Ascend).
NMSKernel = Callable[[Tensor, Tensor, float], Tensor]


def _candidates(
    image_prediction: Tensor,
    conf_threshold: float,
    multi_label: bool,
    classes: Sequence[int] | None,
) -> Tensor:
    """Turn (N, 5+nc) [cx, cy, w, h, obj, cls...] rows into (M, 6) [x1, y1, x2, y2, score, class] candidates."""
    # Objectness filter first, then score = obj * cls (YOLOV5-FACTS.md, "NMS at validation").
    rows = image_prediction[image_prediction[:, 4] > conf_threshold]
    boxes = xywh_to_xyxy(rows[:, :4])
    class_scores = rows[:, 5:] * rows[:, 4:5]
    if multi_label:
        # One candidate per (box, class) whose score passes the threshold.
        box_index, class_index = (class_scores > conf_threshold).nonzero(as_tuple=True)
        scores = class_scores[box_index, class_index]
        boxes = boxes[box_index]
    else:
        scores, class_index = class_scores.max(dim=1)
        passing = scores > conf_threshold
        boxes, scores, class_index = boxes[passing], scores[passing], class_index[passing]
    detections = torch.cat((boxes, scores[:, None], class_index[:, None].to(boxes.dtype)), dim=1)
    if classes is not None:
        wanted = torch.tensor(list(classes), device=detections.device, dtype=detections.dtype)
        detections = detections[(detections[:, 5:6] == wanted).any(dim=1)]
    return detections


def non_max_suppression(
    prediction: Tensor,
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    *,
    nms: NMSKernel,
    classes: Sequence[int] | None = None,
    agnostic: bool = False,
    multi_label: bool = True,
    max_candidates: int = 30000,
    max_det: int = 300,
    max_wh: int = 7680,
) -> list[Tensor]:
    """Suppress overlapping boxes per image and class.

    prediction: (B, N, 5 + nc) decoded head output [cx, cy, w, h (pixels), obj, class scores...], sigmoided.
    Returns one (n, 6) tensor per image, [x1, y1, x2, y2 (pixels), score, class], in decreasing score order.
    nms: the backend's single-class kernel (backend.nms). At most max_candidates, the best by score, enter it.
    """
    if prediction.dim() != 3 or prediction.shape[2] < 6:
        raise ValueError(f"prediction must be (B, N, 5 + nc) with nc >= 1, got {tuple(prediction.shape)}")
    num_classes = prediction.shape[2] - 5
    # Multi-label only makes a difference with more than one class (YOLOV5-FACTS.md).
    use_multi_label = multi_label and num_classes > 1
    outputs = []
    for image_prediction in prediction:
        detections = _candidates(image_prediction, conf_threshold, use_multi_label, classes)
        if detections.shape[0] == 0:
            outputs.append(detections.new_zeros((0, 6)))
            continue
        # Stable sort so equal scores keep their original order: every kernel then sees the same order,
        # and the cap keeps the top max_candidates by score (YOLOV5-FACTS.md: at most 30,000 enter NMS).
        order = torch.sort(detections[:, 4], descending=True, stable=True).indices[:max_candidates]
        detections = detections[order]
        # Offsetting each class by max_wh pixels keeps classes apart in one single-class NMS call.
        offsets = detections[:, 5:6] * (0 if agnostic else max_wh)
        kept = nms((detections[:, :4] + offsets).float(), detections[:, 4].float(), iou_threshold)
        outputs.append(detections[kept.long()[:max_det]])
    return outputs
