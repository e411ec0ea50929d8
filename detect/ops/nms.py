"""Non-maximum suppression for YOLO head outputs, with the IoU kernel injected by the caller's backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from detect.ops.boxes import xywh_to_xyxy

# (boxes (N, 4) xyxy, scores (N,), iou_threshold) -> kept indices, int64, in decreasing score order.
# The backend supplies it (Backend.nms: torchvision.ops.nms on CPU and CUDA, the NPU kernel on Ascend).
NMSKernel = Callable[[Tensor, Tensor, float], Tensor]


def _where(mask: Tensor) -> Tensor:
    """Indices of the true entries of a 1-D mask."""
    return mask.nonzero().squeeze(1)


def _candidates(
    prediction: Tensor,
    conf_threshold: float,
    multi_label: bool,
    classes: Sequence[int] | None,
) -> tuple[Tensor, Tensor]:
    """(M, 6) [x1, y1, x2, y2, score, class] candidates of a (B, N, 5+nc) batch and their (M,) image indices.

    Rows are gathered with index_select: on the CPU, tensor[indices] (aten::index) is 10-300x slower for these sizes
    (30,748 int64 indices: 0.3-12 ms against 0.04 ms, 1 and 2 threads, torch 2.14).
    """
    batch, boxes_per_image, width = prediction.shape
    flat = prediction.reshape(batch * boxes_per_image, width)
    # Objectness filter first, then score = obj * cls (YOLOV5-FACTS.md, "NMS at validation").
    passing = _where(flat[:, 4] > conf_threshold)
    rows, image = flat.index_select(0, passing), passing // boxes_per_image
    if multi_label:
        # One candidate per (box, class) whose score passes. Multiplying every tiny class score by obj underflows,
        # and x86 takes a slow path for each underflow (measured: 2.5 ms -> 0.03 ms per 1,429 x 80 product with
        # denormals flushed), so a class first passes cls > conf / obj, relaxed by 1e-6 (three float32 roundings,
        # 1.8e-7, are all it needs), and only those products are formed and compared exactly.
        near = (rows[:, 5:] > conf_threshold / rows[:, 4:5] * (1 - 1e-6)).nonzero()
        box_index, class_index = near[:, 0], near[:, 1]
        scores = rows.view(-1).index_select(0, box_index * width + 5 + class_index)
        scores = scores * rows[:, 4].index_select(0, box_index)
        exact = _where(scores > conf_threshold)
        box_index, class_index, scores = (t.index_select(0, exact) for t in (box_index, class_index, scores))
    else:
        scores, class_index = (rows[:, 5:] * rows[:, 4:5]).max(dim=1)
        box_index = _where(scores > conf_threshold)
        scores, class_index = scores.index_select(0, box_index), class_index.index_select(0, box_index)
    boxes = xywh_to_xyxy(rows[:, :4].index_select(0, box_index))
    detections = torch.cat((boxes, scores[:, None], class_index[:, None].to(boxes.dtype)), dim=1)
    image = image.index_select(0, box_index)
    if classes is not None:
        wanted = torch.tensor(list(classes), device=detections.device, dtype=detections.dtype)
        chosen = _where((detections[:, 5:6] == wanted).any(dim=1))
        detections, image = detections.index_select(0, chosen), image.index_select(0, chosen)
    return detections, image


def _best_per_image(scores: Tensor, image: Tensor, limit: int) -> Tensor:
    """Indices of each image's `limit` best scores: image by image, decreasing score, ties in their given order."""
    order = torch.sort(scores, descending=True, stable=True).indices
    order = order.index_select(0, torch.sort(image.index_select(0, order), stable=True).indices)
    grouped = image.index_select(0, order)
    first = torch.searchsorted(grouped, grouped)  # where each row's image starts in the grouped list
    rank = torch.arange(len(order), device=order.device) - first
    return order.index_select(0, _where(rank < limit))


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
    whole_batch: bool = False,
) -> list[Tensor]:
    """Suppress overlapping boxes per image and class.

    prediction: (B, N, 5 + nc) decoded head output [cx, cy, w, h (pixels), obj, class scores...], sigmoided.
    Returns one (n, 6) tensor per image, [x1, y1, x2, y2 (pixels), score, class], in decreasing score order.
    nms: the backend's single-class kernel (backend.nms). At most max_candidates per image, the best by score, enter
    it; whole_batch: one kernel call for every image of the batch (images kept apart by a y offset), else one per image.
    """
    if prediction.dim() != 3 or prediction.shape[2] < 6:
        raise ValueError(f"prediction must be (B, N, 5 + nc) with nc >= 1, got {tuple(prediction.shape)}")
    batch, num_classes = prediction.shape[0], prediction.shape[2] - 5
    # Multi-label only makes a difference with more than one class (YOLOV5-FACTS.md).
    detections, image = _candidates(prediction, conf_threshold, multi_label and num_classes > 1, classes)
    # The cap keeps each image's best max_candidates by score, a stable sort so equal scores keep their original
    # order and every kernel sees the same order (YOLOV5-FACTS.md: at most 30,000 enter NMS).
    chosen = _best_per_image(detections[:, 4], image, max_candidates)
    detections, image = detections.index_select(0, chosen), image.index_select(0, chosen)
    # Offsetting each class by max_wh pixels (x and y) keeps classes apart in one single-class NMS call; with the
    # whole batch in one call, each image also moves down by max_wh on y alone, so that x keeps the rounding that a
    # call per image has (an offset of image * classes * max_wh would reach 1e7 px, where float32 steps are 1 px).
    offsets = detections[:, 5:6] * (0 if agnostic else max_wh)
    if whole_batch:
        offsets = offsets + torch.stack((torch.zeros_like(image), image) * 2, dim=1) * max_wh
        kept = nms((detections[:, :4] + offsets).float(), detections[:, 4].float(), iou_threshold).long()
        kept_image = image.index_select(0, kept)
        kept = kept.index_select(0, torch.sort(kept_image, stable=True).indices)  # by image, each by decreasing score
        groups = kept.split(torch.bincount(kept_image, minlength=batch).tolist())
        return [detections.index_select(0, group[:max_det]) for group in groups]
    # The candidates are grouped by image already: split them into views instead of gathering each image's rows.
    counts = torch.bincount(image, minlength=batch).tolist()
    outputs = []
    for part, shift in zip(detections.split(counts), offsets.split(counts)):
        if len(part) > 0:  # no kernel launch for an image without candidates
            kept = nms((part[:, :4] + shift).float(), part[:, 4].float(), iou_threshold).long()
            part = part.index_select(0, kept[:max_det])
        outputs.append(part)
    return outputs
