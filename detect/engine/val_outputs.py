"""Optional validation outputs: per-image YOLO txt of detections, confusion matrix and PR curve PNGs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from detect.data import LabelledSplit
from detect.engine.confusion import ConfusionMatrix
from detect.engine.evaluator import Metrics
from detect.engine.metric_plots import plot_confusion_matrix, plot_pr_curve
from detect.engine.validate import ImageDetections


def _xyxy_pixels(boxes: np.ndarray, width: int, height: int) -> torch.Tensor:
    """(n, 4) normalised cx cy w h -> (n, 4) xyxy pixels."""
    cx, cy, w, h = (torch.from_numpy(np.asarray(boxes, np.float64)).reshape(-1, 4) * torch.tensor(
        [width, height, width, height], dtype=torch.float64)).unbind(1)
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), dim=1)


class ValOutputs:
    """Consumes each image's detections (see engine.validate.evaluate's on_image) and writes the extras."""

    def __init__(self, save_dir: Path, split: LabelledSplit, save_txt: bool, save_conf: bool, plots: bool):
        self.save_dir, self.split, self.save_conf = save_dir, split, save_conf
        self.labels_dir = save_dir / "labels" if save_txt else None
        self.confusion = ConfusionMatrix(len(split.names)) if plots else None
        self._records = {record.image_id: record for record in split.records}
        if self.labels_dir is not None:
            self.labels_dir.mkdir(parents=True, exist_ok=True)

    def add(self, image: ImageDetections) -> None:
        if self.labels_dir is not None:
            self._write_txt(image)
        if self.confusion is not None:
            record = self._records[image.image_id]
            keep = ~record.crowd
            boxes = _xyxy_pixels(record.boxes[keep], record.width, record.height)
            self.confusion.update(image.detections, torch.from_numpy(record.classes[keep]), boxes)

    def _write_txt(self, image: ImageDetections) -> None:
        """One row per detection: class cx cy w h (normalised to the original image) [score]."""
        height, width = image.letterbox.original
        rows = []
        for x1, y1, x2, y2, score, cls in image.detections.tolist():
            row = f"{int(cls)} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} " \
                  f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}"
            rows.append(row + (f" {score:.5f}" if self.save_conf else ""))
        (self.labels_dir / f"{Path(image.path).stem}.txt").write_text("".join(r + "\n" for r in rows))

    def finish(self, metrics: Metrics) -> None:
        """Write the plots once every image has been seen."""
        if self.confusion is not None:
            plot_confusion_matrix(self.confusion, self.split.names, self.save_dir / "confusion_matrix.png")
            plot_pr_curve(metrics, self.save_dir / "PR_curve.png")
