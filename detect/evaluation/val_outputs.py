"""Optional validation outputs: per-image YOLO txt of detections, confusion matrix, PR curve and predictions plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from detect.atomic_file import make_folder, write_text
from detect.data import LabelledSplit
from detect.evaluation.confusion import ConfusionMatrix
from detect.evaluation.evaluator import Metrics
from detect.evaluation.metric_plots import plot_confusion_matrix, plot_pr_curve
from detect.evaluation.val_loop import ImageDetections
from detect.inference.annotate import plot_predictions
from detect.inference.predict_outputs import yolo_txt
from detect.ops.boxes import xywhn_to_xyxy

PLOTTED_IMAGES = 16


class ValOutputs:
    """Consumes each image's detections (see evaluation.val_loop.evaluate's on_image) and writes the extras."""

    def __init__(self, save_dir: Path, split: LabelledSplit, save_txt: bool, save_conf: bool, plots: bool):
        self.save_dir, self.split, self.save_conf = save_dir, split, save_conf
        self.labels_dir = save_dir / "labels" if save_txt else None
        self.confusion = ConfusionMatrix(len(split.names)) if plots else None
        self._records = {record.image_id: record for record in split.records}
        self._shown: list[tuple[Path, torch.Tensor]] = []  # the first PLOTTED_IMAGES images, for val_predictions.jpg
        if self.labels_dir is not None:
            make_folder(self.labels_dir)

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
        write_text(self.labels_dir / f"{Path(image.path).stem}.txt", text)

    def finish(self, metrics: Metrics) -> None:
        """Write the plots once every image has been seen."""
        if self.confusion is not None:
            plot_confusion_matrix(self.confusion, self.split.names, self.save_dir / "confusion_matrix.png")
            plot_pr_curve(metrics, self.save_dir / "PR_curve.png")
            plot_predictions(self._shown, tuple(self.split.names), self.save_dir / "val_predictions.jpg")
