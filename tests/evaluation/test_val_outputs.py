"""Validation extras: the YOLO txt of an image's detections and the confusion matrix, in the right frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from detect.data import LabelledSplit, LetterboxInfo
from detect.evaluation.val_loop import ImageDetections
from detect.evaluation.val_outputs import ValOutputs
from tests.evaluation.test_evaluator import perfect_detections, tiny_dataset


def test_txt_rows_and_confusion_matrix_of_exact_detections(tmp_path: Path) -> None:
    records = tiny_dataset()
    split = LabelledSplit(records=records, names=["cat", "dog", "bird"], coco_json=None, category_ids=None,
                          counts={}, details_file=None, cache_state="loaded")
    outputs = ValOutputs(tmp_path, split, save_txt=True, save_conf=True, plots=True)
    for record, detections in zip(records, perfect_detections(records).values()):
        info = LetterboxInfo(original=(record.height, record.width), gain=1.0, pad=(0.0, 0.0))
        outputs.add(ImageDetections(record.image_id, str(record.path), info, detections.float()))
    # 200 x 100 images: the txt holds the labels back, normalised to the original image, with the score.
    assert (tmp_path / "labels" / "1.txt").read_text() == ("0 0.250000 0.500000 0.200000 0.400000 0.90000\n"
                                                           "1 0.750000 0.500000 0.300000 0.600000 0.90000\n")
    assert (tmp_path / "labels" / "2.txt").read_text() == "1 0.500000 0.500000 0.400000 0.800000 0.90000\n"
    # Every non-crowd box matched by its own detection: all on the diagonal (the crowd box is not counted).
    expected = np.zeros((4, 4), np.int64)
    expected[0, 0], expected[1, 1] = 1, 2
    np.testing.assert_array_equal(outputs.confusion.matrix(), expected)
