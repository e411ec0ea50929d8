"""Optional validation outputs: per-image YOLO txt of detections, confusion matrix, PR curve and predictions plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from detect.data import LabelledSplit
from detect.engine.annotate import plot_predictions
from detect.engine.confusion import ConfusionMatrix
from detect.engine.evaluator import Metrics
from detect.engine.metric_plots import plot_confusion_matrix, plot_pr_curve
from detect.engine.validate import ImageDetections
from detect.ops.boxes import xywhn_to_xyxy, xyxy_to_xywhn

PLOTTED_IMAGES = 16


def yolo_txt(detections: torch.Tensor, height: int, width: int, save_conf: bool) -> str:
    """(n, 6) [x1, y1, x2, y2, score, class] pixel detections as YOLO txt lines: class cx cy w h [score],
    normalised to a (height, width) image."""
    boxes = xyxy_to_xywhn(detections[:, :4].double(), width, height).tolist()
    rows = []
    for (cx, cy, w, h), (score, cls) in zip(boxes, detections[:, 4:].tolist()):
        row = f"{int(cls)} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}"
        rows.append(row + (f" {score:.5f}" if save_conf else ""))
    return "".join(row + "\n" for row in rows)


class ValOutputs:
    """Consumes each image's detections (see engine.validate.evaluate's on_image) and writes the extras."""

    def __init__(self, save_dir: Path, split: LabelledSplit, save_txt: bool, save_conf: bool, plots: bool):
        self.save_dir, self.split, self.save_conf = save_dir, split, save_conf
        self.labels_dir = save_dir / "labels" if save_txt else None
        self.confusion = ConfusionMatrix(len(split.names)) if plots else None
        self._records = {record.image_id: record for record in split.records}
        self._shown: list[tuple[Path, torch.Tensor]] = []  # the first PLOTTED_IMAGES images, for val_predictions.jpg
        if self.labels_dir is not None:
            self.labels_dir.mkdir(parents=True, exist_ok=True)

    def add(self, image: ImageDetections) -> None:
        if self.labels_dir is not None:
            self._write_txt(image)
        if self.confusion is not None:
            if len(self._shown) < PLOTTED_IMAGES:
                self._shown.append((Path(image.path), image.detections))
            record = self._records[image.image_id]
            keep = ~record.crowd
            normalised = torch.from_numpy(np.asarray(record.boxes[keep], np.float64)).reshape(-1, 4)
            boxes = xywhn_to_xyxy(normalised, record.width, record.height)
            self.confusion.update(image.detections, torch.from_numpy(record.classes[keep]), boxes)

    def _write_txt(self, image: ImageDetections) -> None:
        """One row per detection: class cx cy w h (normalised to the original image) [score]."""
        text = yolo_txt(image.detections, *image.letterbox.original, self.save_conf)
        (self.labels_dir / f"{Path(image.path).stem}.txt").write_text(text)

    def finish(self, metrics: Metrics) -> None:
        """Write the plots once every image has been seen."""
        if self.confusion is not None:
            plot_confusion_matrix(self.confusion, self.split.names, self.save_dir / "confusion_matrix.png")
            plot_pr_curve(metrics, self.save_dir / "PR_curve.png")
            plot_predictions(self._shown, tuple(self.split.names), self.save_dir / "val_predictions.jpg")
