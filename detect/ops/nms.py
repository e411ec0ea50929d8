"""Non-maximum suppression for YOLO head outputs, with the IoU kernel injected by the caller's backend."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

from detect.ops.boxes import xywh_to_xyxy

# (boxes (N, 4) xyxy, scores (N,), iou_threshold) -> kept indices, int64, in decreasing score order.
# The backend supplies it (Backend.nms: torchvision.ops.nms on CPU and CUDA, the NPU kernel on Ascend).
NMSKernel = Callable[[Tensor, Tensor, float], Tensor]

# Rows one kernel call may hold when it joins several (image, class) groups (see _suppress_in_groups): the fastest
# of the sizes measured, all far faster than one call per image (docs/benchmarks.md, "Figures behind constants").
PACK = 256


@functools.cache
def _pool(threads: int, pid: int) -> ThreadPoolExecutor:
    """A pool for kernel calls, one per process (`pid`: a forked child gets its own, not its parent's dead threads)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="nms")


def _where(mask: Tensor, numpy: bool | None = None) -> Tensor:
    """Indices (int64) of the true entries of a mask, counted in row-major order over all its elements; with numpy on
    the CPU unless `numpy` is False."""
    if mask.device.type == "cpu" and numpy is not False:
        # numpy's flatnonzero is several times faster than torch.nonzero on the CPU (docs/benchmarks.md, "Figures
        # behind constants")
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.reshape(-1).nonzero().squeeze(1)


def _candidates(
    prediction: Tensor,
    conf_threshold: float,
    multi_label: bool,
    classes: Sequence[int] | None,
    numpy_where: bool | None = None,
) -> tuple[Tensor, Tensor]:
    """(M, 6) [x1, y1, x2, y2, score, class] candidates of a (B, N, 5+nc) batch and their (M,) image indices.

    Rows are gathered with index_select: on the CPU, tensor[indices] (aten::index) is 10-300x slower for these sizes
    (30,748 int64 indices: 0.3-12 ms against 0.04 ms, 1 and 2 threads, torch 2.14).
    """
    batch, boxes_per_image, width = prediction.shape
    where = functools.partial(_where, numpy=numpy_where)
    flat = prediction.reshape(batch * boxes_per_image, width)
    # Objectness filter first, then score = obj * cls (docs/yolov5.md, "NMS").
    passing = where(flat[:, 4] > conf_threshold)
    rows, image = flat.index_select(0, passing), passing // boxes_per_image
    if multi_label:
        # One candidate per (box, class) whose score passes. Multiplying every tiny class score by obj underflows,
        # and x86 takes a slow path for each underflow (docs/benchmarks.md, "Figures behind constants"), so a class
        # first passes cls > conf / obj, relaxed by 1e-6 (three float32 roundings,
        # 1.8e-7, are all it needs), and only those products are formed and compared exactly.
        near = where(rows[:, 5:] > conf_threshold / rows[:, 4:5] * (1 - 1e-6))
        box_index, class_index = near // (width - 5), near % (width - 5)
        scores = rows.view(-1).index_select(0, box_index * width + 5 + class_index)
        scores = scores * rows[:, 4].index_select(0, box_index)
        exact = where(scores > conf_threshold)
        box_index, class_index, scores = (t.index_select(0, exact) for t in (box_index, class_index, scores))
    else:
        scores, class_index = (rows[:, 5:] * rows[:, 4:5]).max(dim=1)
        box_index = where(scores > conf_threshold)
        scores, class_index = scores.index_select(0, box_index), class_index.index_select(0, box_index)
    boxes = xywh_to_xyxy(rows[:, :4].index_select(0, box_index))
    detections = torch.cat((boxes, scores[:, None], class_index[:, None].to(boxes.dtype)), dim=1)
    image = image.index_select(0, box_index)
    if classes is not None:
        wanted = torch.tensor(list(classes), device=detections.device, dtype=detections.dtype)
        chosen = where((detections[:, 5:6] == wanted).any(dim=1))
        detections, image = detections.index_select(0, chosen), image.index_select(0, chosen)
    return detections, image


def _best_per_image(scores: Tensor, image: Tensor, limit: int, numpy_where: bool | None = None) -> Tensor:
    """Indices of each image's `limit` best scores: image by image, decreasing score, ties in their given order."""
    order = torch.sort(scores, descending=True, stable=True).indices
    order = order.index_select(0, torch.sort(image.index_select(0, order), stable=True).indices)
    grouped = image.index_select(0, order)
    first = torch.searchsorted(grouped, grouped)  # where each row's image starts in the grouped list
    rank = torch.arange(len(order), device=order.device) - first
    return order.index_select(0, _where(rank < limit, numpy_where))


def _packed_calls(group_sizes: list[int], group_images: list[int], pack: int) -> list[int]:
    """Lengths of the kernel calls: consecutive groups of one image joined while a call holds at most `pack` rows."""
    calls: list[int] = []
    length, last_image = 0, -1
    for size, image in zip(group_sizes, group_images):
        if length and (length + size > pack or image != last_image):
            calls.append(length)
            length = 0
        length, last_image = length + size, image
    if length:
        calls.append(length)
    return calls


def _suppress_in_groups(boxes: Tensor, scores: Tensor, group: Tensor, groups_per_image: int, iou_threshold: float,
                        nms: NMSKernel, threads: int) -> Tensor:
    """Indices of the rows that NMS keeps within each group, in no particular order.

    boxes (M, 4) xyxy, already offset by class; scores (M,); group (M,) image * groups_per_image + group in the
    image. The kernel compares every kept box with every
    later one, so a call over all of an image's classes spends most of its time on pairs whose offset boxes can never
    overlap; a call per group does only the comparisons that decide something. Small groups share a call (their
    offsets keep them apart), since a call costs more than comparing a few dozen boxes. With threads > 1 the calls
    run on that many threads (torchvision's CPU kernel is single-threaded and releases the GIL), results in order.
    """
    order = torch.sort(group, stable=True).indices  # by group, each group in the rows' order (the kernel sorts)
    keys, sizes = torch.unique_consecutive(group.index_select(0, order), return_counts=True)
    calls = _packed_calls(sizes.tolist(), (keys // groups_per_image).tolist(), PACK)
    parts = list(zip(boxes.index_select(0, order).split(calls), scores.index_select(0, order).split(calls)))

    def suppress(part: tuple[Tensor, Tensor]) -> Tensor:
        return nms(part[0], part[1], iou_threshold)

    runs = _pool(threads, os.getpid()).map(suppress, parts) if threads > 1 and len(parts) > 1 else map(suppress, parts)
    kept, start = [], 0
    for length, part_kept in zip(calls, runs):
        kept.append(part_kept.long() + start)
        start += length
    return order.index_select(0, torch.cat(kept)) if kept else order


# Thirteen parameters on purpose: yolov5's non_max_suppression's own keywords (conf_thres, iou_thres, classes,
# agnostic, multi_label, max_det ...) under our names, which its users' scripts pass one by one, and how the backend
# runs its kernel (nms, whole_batch, threads, numpy_where); a settings object would only rename them (evaluation's
# EvalSettings groups the ones validation sets, the backend the kernel's).
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
    threads: int = 1,
    numpy_where: bool | None = None,
) -> list[Tensor]:
    """Suppress overlapping boxes per image and class.

    prediction: (B, N, 5 + nc) decoded head output [cx, cy, w, h (pixels), obj, class scores...], sigmoided.
    Returns one (n, 6) tensor per image, [x1, y1, x2, y2 (pixels), score, class], in decreasing score order.
    nms: the backend's single-class kernel (backend.nms). At most max_candidates per image, the best by score, enter
    it; whole_batch: one kernel call for every image of the batch (images kept apart by a y offset), else calls per
    (image, class) group, small groups packed together, on `threads` threads (the backend's nms_threads).
    numpy_where: find candidates' indices with numpy (fastest on the CPU; None: when the prediction is on the CPU).
    """
    if prediction.dim() != 3 or prediction.shape[2] < 6:
        raise ValueError(f"prediction must be (B, N, 5 + nc) with nc >= 1, got {tuple(prediction.shape)}")
    batch, num_classes = prediction.shape[0], prediction.shape[2] - 5
    # Multi-label only makes a difference with more than one class (docs/yolov5.md, "NMS").
    detections, image = _candidates(prediction, conf_threshold, multi_label and num_classes > 1, classes, numpy_where)
    # The cap keeps each image's best max_candidates by score, a stable sort so equal scores keep their original
    # order and every kernel sees the same order (docs/yolov5.md, "NMS": at most 30,000 enter NMS). Calls per group need
    # no order, so there the sort runs only when the cap bites (it took a fifth of the time, scripts/bench_nms.py).
    if whole_batch or int(torch.bincount(image, minlength=batch).max()) > max_candidates:
        chosen = _best_per_image(detections[:, 4], image, max_candidates, numpy_where)
        detections, image = detections.index_select(0, chosen), image.index_select(0, chosen)
    # Offsetting each class by max_wh pixels (x and y) keeps classes apart in one single-class NMS call; with the
    # whole batch in one call, each image also moves down by max_wh on y alone, so that x keeps the rounding that a
    # call per image has (an offset of image * classes * max_wh would reach 1e7 px, where float32 steps are 1 px).
    offsets = detections[:, 5:6] * (0 if agnostic else max_wh)
    if whole_batch:
        offsets = offsets + torch.stack((torch.zeros_like(image), image) * 2, dim=1) * max_wh
        kept = nms((detections[:, :4] + offsets).float(), detections[:, 4].float(), iou_threshold).long()
    else:
        groups = 1 if agnostic else num_classes
        group = image * groups + (0 if agnostic else detections[:, 5].long())
        kept = _suppress_in_groups((detections[:, :4] + offsets).float(), detections[:, 4].float(), group, groups,
                                   iou_threshold, nms, threads)
    # Kept rows by image, each image by decreasing score (ties in the rows' order), as one call per image returns them.
    kept = torch.sort(kept).values
    kept = kept.index_select(0, torch.sort(detections[:, 4].index_select(0, kept), descending=True, stable=True).indices)
    kept_image = image.index_select(0, kept)
    kept = kept.index_select(0, torch.sort(kept_image, stable=True).indices)
    return [detections.index_select(0, part[:max_det])
            for part in kept.split(torch.bincount(kept_image, minlength=batch).tolist())]
