"""Confusion matrix on a hand-made case, and its plots."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import torch

from detect.evaluation.confusion import ConfusionMatrix
from detect.evaluation.evaluator import CocoEvaluator


def test_hand_made_matrix() -> None:
    confusion = ConfusionMatrix(num_classes=3)
    true_classes = torch.tensor([0, 1, 2])
    true_boxes = torch.tensor([[0.0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]])
    detections = torch.tensor([
        [0.0, 0, 10, 10, 0.9, 0],      # right class on box 0
        [0.5, 0, 10.5, 10, 0.8, 1],    # duplicate on box 0: box already taken -> false positive of class 1
        [20, 20, 30, 31, 0.7, 2],      # wrong class on box 1
        [100, 100, 110, 110, 0.6, 0],  # nothing there -> false positive of class 0
        [50, 50, 60, 60, 0.2, 2],      # below conf 0.25: ignored, so box 2 is missed
        [52, 50, 62, 60, 0.5, 2],      # IoU 8/12 = 0.67 > 0.45 with box 2 -> true positive after all
    ])
    confusion.update(detections, true_classes, true_boxes)
    expected = np.zeros((4, 4), dtype=np.int64)
    expected[0, 0] = 1
    expected[2, 1] = 1
    expected[2, 2] = 1
    expected[1, 3] = 1
    expected[0, 3] = 1
    np.testing.assert_array_equal(confusion.matrix(), expected)
    # An image with boxes and no detections: every box is missed (background row).
    confusion.update(torch.zeros(0, 6), torch.tensor([1, 1]), torch.tensor([[0.0, 0, 5, 5], [5, 5, 9, 9]]))
    assert confusion.matrix()[3, 1] == 2
    # An image with detections and no boxes: every detection is a false positive (background column).
    confusion.update(torch.tensor([[0.0, 0, 5, 5, 0.9, 2]]), torch.zeros(0), torch.zeros(0, 4))
    assert confusion.matrix()[2, 3] == 1
    assert confusion.normalized()[:, 1].sum() == 1.0


def test_iou_threshold_is_strict() -> None:
    confusion = ConfusionMatrix(num_classes=1, iou_threshold=0.5)
    # IoU exactly 0.5 (overlap 50, union 100) does not match.
    confusion.update(torch.tensor([[0.0, 0, 10, 7.5, 0.9, 0]]), torch.tensor([0]), torch.tensor([[0.0, 2.5, 10, 10]]))
    np.testing.assert_array_equal(confusion.matrix(), [[0, 1], [1, 0]])


def test_plots_write_pngs_without_pyplot(tmp_path: Path) -> None:
    from detect.evaluation import metric_plots
    from tests.evaluation.test_evaluator import perfect_detections, tiny_dataset

    records = tiny_dataset()
    evaluator = CocoEvaluator.from_records(records, ["cat", "dog", "bird"])
    for image_id, rows in perfect_detections(records).items():
        evaluator.add(image_id, rows)
    metrics = evaluator.evaluate()
    pr = metric_plots.plot_pr_curve(metrics, tmp_path / "PR_curve.png")
    confusion = ConfusionMatrix(3)
    confusion.update(torch.tensor([[0.0, 0, 10, 10, 0.9, 0]]), torch.tensor([0]), torch.tensor([[0.0, 0, 10, 10]]))
    matrix = metric_plots.plot_confusion_matrix(confusion, ["cat", "dog", "bird"], tmp_path / "confusion_matrix.png")
    for path in (pr, matrix):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert "matplotlib.pyplot" not in sys.modules or sys.modules["matplotlib.pyplot"].get_fignums() == []


def test_20000_classes_keep_the_pairs_seen_and_the_plot_the_most_counted(tmp_path: Path) -> None:
    from detect.evaluation import metric_plots

    names = [f"class{index}" for index in range(20_000)]
    tracemalloc.start()
    try:
        confusion = ConfusionMatrix(len(names))
        boxes = torch.tensor([[0.0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]])
        detections = torch.tensor([[0.0, 0, 10, 10, 0.9, 19_999], [20, 20, 30, 30, 0.9, 5]])
        for _ in range(2):
            confusion.update(detections, torch.tensor([19_999, 7, 3]), boxes)
        path = metric_plots.plot_confusion_matrix(confusion, names, tmp_path / "confusion_matrix.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20 and path.stat().st_size > 5000  # a full matrix: 3.2 GB
    assert confusion.seen_classes() == [19_999, 3, 5, 7]
    # rows predicted, columns true, background last: the detection of class 5 on the box of class 7, box 3 missed
    np.testing.assert_array_equal(confusion.matrix([5, 7, 19_999]), [[0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 2, 0],
                                                                       [0, 0, 0, 0]])
    np.testing.assert_array_equal(confusion.normalized([3, 19_999])[:, 0], [0, 0, 1])  # all of class 3's boxes
    np.testing.assert_array_equal(confusion.normalized([7]), [[0, 0], [0, 0]])  # its pairs are with class 5
