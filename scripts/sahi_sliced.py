"""SAHI's sliced inference of one of our checkpoints, for scripts/tiles_side_by_side.sh: our Detector (plain, at
the slice size, conf 0.001, IoU 0.6, multi-label, as val) behind SAHI's DetectionModel, run by its
get_sliced_prediction with SLICE px slices (640 by default), overlap 0.2, 8 slices a batch, its standard prediction
of the whole image and its merge: class-wise NMS by IoU 0.5 (its default is GREEDYNMM by IOS 0.5, but SAHI 0.12.8
switches to NMS by IoU, with a warning, below a model confidence of 0.1, and this runs at val's 0.001); the 300 best
boxes of each image kept, as our val kept them when this was measured.

Usage: python scripts/sahi_sliced.py WEIGHTS GROUND_TRUTH_JSON IMAGE_FOLDER [SLICE]
prints the COCO results json of the ground truth's images and, on stderr, the seconds they took. Needs `sahi`
(never a dependency of the project: install it in an environment of its own).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from sahi.models.base import DetectionModel
from sahi.predict import get_sliced_prediction
from sahi.prediction import ObjectPrediction
from sahi.utils.compatibility import fix_full_shape_list, fix_shift_amount_list

from detect.inference.detector import Detector, PredictSettings

MAX_DET = 300


class OurDetector(DetectionModel):
    """Our Detector as SAHI's model: a batch of slices is one call."""

    slice_size = 640

    def load_model(self) -> None:
        settings = PredictSettings(imgsz=(self.slice_size, self.slice_size), conf_threshold=self.confidence_threshold,
                                   iou_threshold=0.6, max_det=MAX_DET, multi_label=True)
        self.set_model(Detector(self.model_path, "cpu", settings))

    def set_model(self, model: Detector, **kwargs: object) -> None:
        self.model = model
        self.category_mapping = {str(index): name for index, name in enumerate(model.names)}

    def perform_inference(self, image: np.ndarray) -> None:
        self.perform_batch_inference([image])

    def perform_batch_inference(self, images: list[np.ndarray]) -> None:
        # SAHI's slices are RGB; the Detector takes BGR as cv2 reads it
        self._original_predictions = [found.rows for found in self.model([image[..., ::-1].copy() for image in images])]

    def _create_object_prediction_list_from_original_predictions(self, shift_amount_list=None,
                                                                 full_shape_list=None) -> None:
        shifts = fix_shift_amount_list(shift_amount_list or [0, 0])  # SAHI passes one image's as a flat pair
        shapes = fix_full_shape_list(full_shape_list) or [None] * len(self._original_predictions)
        self._object_prediction_list_per_image = [
            [ObjectPrediction(bbox=row[:4].tolist(), category_id=int(row[5]), score=float(row[4]),
                              category_name=self.category_mapping[str(int(row[5]))], shift_amount=list(shift),
                              full_shape=shape) for row in rows if row[2] > row[0] and row[3] > row[1]]
            for rows, shift, shape in zip(self._original_predictions, shifts, shapes)]


def sahi_predictions(weights: Path, ground_truth: Path, images: Path, size: int) -> tuple[list[dict], float]:
    """COCO results of every image of `ground_truth` (files in `images`) in slices of `size` px, and the seconds SAHI
    took over them."""
    OurDetector.slice_size = size
    model = OurDetector(model_path=str(weights), confidence_threshold=0.001, device="cpu")
    truth = json.loads(ground_truth.read_text())
    category_ids = {index: category["id"] for index, category in enumerate(truth["categories"])}
    results, start = [], time.perf_counter()
    for image in truth["images"]:
        found = get_sliced_prediction(str(images / image["file_name"]), model, slice_height=size, slice_width=size,
                                      overlap_height_ratio=0.2, overlap_width_ratio=0.2, batch_size=8, verbose=0)
        best = sorted(found.object_prediction_list, key=lambda prediction: -prediction.score.value)[:MAX_DET]
        results += [{"image_id": image["id"], "category_id": category_ids[prediction.category.id],
                     "bbox": [float(value) for value in prediction.bbox.to_xywh()],
                     "score": float(prediction.score.value)} for prediction in best]
    return results, time.perf_counter() - start


if __name__ == "__main__":
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 640
    predictions, seconds = sahi_predictions(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), size)
    print(json.dumps(predictions))
    print(f"{seconds:.2f}", file=sys.stderr)
