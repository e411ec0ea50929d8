"""Detection confusion matrix with a background row and column, matched the yolov5 way."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from detect.ops.boxes import box_iou


class ConfusionMatrix:
    """Counts (predicted class, true class) pairs; index num_classes stands for background.

    matrix()[p, t]: rows are predicted classes, columns true classes. [p, background] counts false positives (a
    detection matching no box), [background, t] missed boxes. Defaults conf 0.25 and IoU 0.45 are yolov5's for this
    plot (its ConfusionMatrix defaults), not the validation NMS settings. Only the pairs that occur are stored: the
    memory follows the classes seen, where a full matrix of 20,000 classes would take 3.2 GB.
    """

    def __init__(self, num_classes: int, conf_threshold: float = 0.25, iou_threshold: float = 0.45) -> None:
        self.num_classes = num_classes
        self.conf_threshold = conf_threshold
        self.iou_threshold = iou_threshold
        self.pairs: Counter[tuple[int, int]] = Counter()  # (predicted, true) -> count

    def update(self, detections: torch.Tensor, true_classes: torch.Tensor, true_boxes: torch.Tensor) -> None:
        """Add one image: (n, 6) [x1, y1, x2, y2, score, class] detections, (m,) classes, (m, 4) xyxy boxes.

        Pass non-crowd boxes only, in the same pixel frame as the detections. Matching is class-agnostic:
        each box and each detection is used at most once, highest IoU first.
        """
        background = self.num_classes
        detections = detections[detections[:, 4] > self.conf_threshold].detach().cpu().double()
        true_classes = true_classes.detach().cpu().long().reshape(-1)
        true_boxes = true_boxes.detach().cpu().double().reshape(-1, 4)
        predicted = detections[:, 5].long()
        truth_index, detection_index = self._matches(true_boxes, detections[:, :4])
        predicted, true_classes = predicted.tolist(), true_classes.tolist()
        for truth, detection in zip(truth_index, detection_index):
            self.pairs[predicted[detection], true_classes[truth]] += 1
        for truth in sorted(set(range(len(true_classes))) - set(truth_index)):
            self.pairs[background, true_classes[truth]] += 1
        for detection in sorted(set(range(len(predicted))) - set(detection_index)):
            self.pairs[predicted[detection], background] += 1

    def _matches(self, true_boxes: torch.Tensor, boxes: torch.Tensor) -> tuple[list[int], list[int]]:
        """One-to-one (truth, detection) pairs with IoU above the threshold, greedily by decreasing IoU."""
        if len(true_boxes) == 0 or len(boxes) == 0:
            return [], []
        iou = box_iou(true_boxes, boxes)
        truth, detection = torch.nonzero(iou > self.iou_threshold, as_tuple=True)
        order = torch.argsort(iou[truth, detection], descending=True, stable=True)
        used_truth: set[int] = set()
        used_detection: set[int] = set()
        pairs_truth, pairs_detection = [], []
        for t, d in zip(truth[order].tolist(), detection[order].tolist()):
            if t not in used_truth and d not in used_detection:
                used_truth.add(t)
                used_detection.add(d)
                pairs_truth.append(t)
                pairs_detection.append(d)
        return pairs_truth, pairs_detection

    def seen_classes(self) -> list[int]:
        """The classes of the counted pairs (background left out), the most counted first, then by index."""
        totals: Counter[int] = Counter()
        for (predicted, true), count in self.pairs.items():
            totals[predicted] += count
            totals[true] += count
        totals.pop(self.num_classes, None)
        return sorted(totals, key=lambda index: (-totals[index], index))

    def matrix(self, classes: Sequence[int] | None = None) -> np.ndarray:
        """(k + 1, k + 1) int64 counts of `classes` (default: every class) and background last; pairs of other
        classes are left out."""
        classes = range(self.num_classes) if classes is None else classes
        position = {index: row for row, index in enumerate([*classes, self.num_classes])}
        matrix = np.zeros((len(position), len(position)), np.int64)
        for (predicted, true), count in self.pairs.items():
            if predicted in position and true in position:
                matrix[position[predicted], position[true]] = count
        return matrix

    def normalized(self, classes: Sequence[int] | None = None) -> np.ndarray:
        """matrix(classes) with each true class's column divided by all the pairs of that class, those of classes
        left out included (columns without boxes stay 0)."""
        classes = range(self.num_classes) if classes is None else classes
        totals: Counter[int] = Counter()
        for (_, true), count in self.pairs.items():
            totals[true] += count
        columns = np.array([totals[index] for index in [*classes, self.num_classes]], np.float64)
        return self.matrix(classes) / np.maximum(columns, 1)
