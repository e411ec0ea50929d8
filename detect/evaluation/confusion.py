"""Detection confusion matrix with a background row and column, matched the yolov5 way."""

from __future__ import annotations

import numpy as np
import torch

from detect.ops.boxes import box_iou


class ConfusionMatrix:
    """Counts (predicted class, true class) pairs; index num_classes stands for background.

    matrix[p, t]: rows are predicted classes, columns true classes. matrix[p, background] counts false
    positives (a detection matching no box), matrix[background, t] missed boxes. Defaults conf 0.25 and
    IoU 0.45 are yolov5's for this plot (its ConfusionMatrix defaults), not the validation NMS settings.
    """

    def __init__(self, num_classes: int, conf_threshold: float = 0.25, iou_threshold: float = 0.45) -> None:
        self.num_classes = num_classes
        self.conf_threshold = conf_threshold
        self.iou_threshold = iou_threshold
        self.matrix = np.zeros((num_classes + 1, num_classes + 1), dtype=np.int64)

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
        for truth, detection in zip(truth_index, detection_index):
            self.matrix[predicted[detection], true_classes[truth]] += 1
        for truth in sorted(set(range(len(true_classes))) - set(truth_index)):
            self.matrix[background, true_classes[truth]] += 1
        for detection in sorted(set(range(len(predicted))) - set(detection_index)):
            self.matrix[predicted[detection], background] += 1

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

    def normalized(self) -> np.ndarray:
        """The matrix with each true-class column divided by its sum (columns without boxes stay 0)."""
        totals = self.matrix.sum(axis=0, keepdims=True)
        return self.matrix / np.maximum(totals, 1)
