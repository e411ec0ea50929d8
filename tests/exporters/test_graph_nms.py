"""`--nms`: ONNX's NonMaxSuppression in the exported graph gives our NMS's detections, in fixed-shape outputs that
val and predict read."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
import torch
import torchvision

from detect import backend as backends
from detect import export, val
from detect.data.images.letterbox import letterbox
from detect.errors import UserError
from detect.inference.exported import GraphNms
from detect.inference.model import load_inference_model
from detect.inference.predictor import Predictor
from detect.ops.nms import non_max_suppression
from tests.exporters.helpers import IMGSZ, eager, onnx_session, run_export
from tests.shared_data import ABSENT_REASON, COCO128, SHARED_PRESENT, YOLOV5N

CPU = backends.select("cpu")


def assert_same_rows(graph_rows: torch.Tensor, expected: torch.Tensor, box_tolerance: float) -> None:
    """The same detections in any order of equal scores: each row matches one expected row of its class."""
    assert len(graph_rows) == len(expected)
    assert torch.all(graph_rows[:-1, 4] >= graph_rows[1:, 4])  # best first
    unmatched = list(range(len(expected)))
    for row in graph_rows:
        distance = [(row[:4] - expected[i, :4]).abs().max().item() + 1e3 * abs(row[4] - expected[i, 4]).item()
                    if row[5] == expected[i, 5] else float("inf") for i in unmatched]
        best = int(np.argmin(distance))
        assert distance[best] < box_tolerance, f"{row} has no counterpart"
        unmatched.pop(best)


def graph_nms_rows(path: Path, images: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    session = onnx_session(path)
    assert [output.name for output in session.get_outputs()] == ["detections", "count"]
    return session.run(None, {"images": images.numpy()})


@pytest.mark.parametrize("opset, agnostic, dynamic", [(11, False, False), (13, True, True), (17, False, True)])
def test_graph_detections_equal_our_nms_on_the_same_predictions(weights, tmp_path, opset, agnostic, dynamic):
    options = ["--include", "onnx", "--nms", "--conf-thres", "0.002", "--iou-thres", "0.5", "--max-det", "20",
               "--opset", str(opset), "--batch-size", "2", *(["--agnostic-nms"] if agnostic else []),
               *(["--dynamic"] if dynamic else [])]
    path = run_export(weights, tmp_path, *options)["onnx"]
    onnx.checker.check_model(onnx.load(str(path)))
    torch.manual_seed(1)
    images = torch.rand(2, 3, *IMGSZ)
    detections, count = graph_nms_rows(path, images)
    assert detections.shape == (2, 20, 6) and detections.dtype == np.float32 and count.dtype == np.int64
    expected = non_max_suppression(torch.from_numpy(eager(weights, images)), 0.002, 0.5, max_det=20,
                                   agnostic=agnostic, multi_label=not agnostic, **CPU.nms_arguments())
    for rows, kept, reference in zip(detections, count, expected):
        assert 0 < kept <= 20 and (rows[kept:] == -1).all()
        assert_same_rows(torch.from_numpy(rows[:kept]), reference, 1e-3)
    if not agnostic:
        assert len(expected[0]) == 20  # max_det cut the list (35 pass): the graph kept the same best 20


def test_val_and_predict_read_the_graph_nms_and_warn_of_thresholds_it_cannot_apply(weights, tmp_path, caplog):
    path = run_export(weights, tmp_path, "--include", "onnx", "--nms", "--conf-thres", "0.002", "--max-det", "40")["onnx"]
    model = load_inference_model(path, CPU)
    assert model.nms == GraphNms(conf_threshold=0.002, iou_threshold=0.45, max_det=40, agnostic=False)
    torch.manual_seed(2)
    images = torch.rand(1, 3, *IMGSZ)
    expected = non_max_suppression(torch.from_numpy(eager(weights, images)), 0.003, 0.45, max_det=40,
                                   classes=[1], **CPU.nms_arguments())
    predictor = Predictor(model, model.nms)
    assert predictor.did_nms
    got = predictor.detections(predictor(images), CPU, conf_threshold=0.003, iou_threshold=0.45, max_det=40,
                               classes=[1])
    assert len(expected[0]) > 0
    assert_same_rows(got[0], expected[0], 1e-3)
    assert "fixed at export" not in caplog.text
    predictor.detections(predictor(images), CPU, conf_threshold=0.001, iou_threshold=0.6, max_det=40)
    assert "--conf-thres 0.001 (the graph keeps scores above 0.002); --iou-thres 0.6" in caplog.text


@pytest.mark.parametrize("options, message", [
    (["--nms"], "--nms puts NMS in ONNX-based graphs"),
    (["--include", "onnx", "--nms", "--opset", "10"], "--nms needs --opset 11"),
    (["--include", "onnx", "--nms", "--max-det", "100000"], "--max-det 100000 is more than this input's"),
])
def test_nms_flags_that_cannot_work_are_refused(weights, tmp_path, options, message):
    with pytest.raises(UserError, match=message):
        run_export(weights, tmp_path, *options)


@pytest.fixture(scope="module")
def yolov5n_exports(tmp_path_factory) -> dict[str, Path]:
    if not SHARED_PRESENT:
        pytest.skip(ABSENT_REASON)
    folder = tmp_path_factory.mktemp("yolov5n")
    common = ["--weights", str(YOLOV5N), "--include", "onnx", "--batch-size", "16"]
    plain = export.export(export.parse_args([*common, "--output-dir", str(folder / "plain")]))["onnx"]
    with_nms = export.export(export.parse_args([*common, "--output-dir", str(folder / "nms"), "--nms",
                                                "--conf-thres", "0.001", "--iou-thres", "0.6"]))["onnx"]
    return {"plain": plain, "nms": with_nms}


def per_class_nms(predictions: torch.Tensor, conf: float, iou: float, max_det: int) -> torch.Tensor:
    """One image's multi-label NMS, class by class in exact coordinates (torchvision's batched_nms)."""
    scores = predictions[:, 5:] * predictions[:, 4:5]
    box, label = (scores > conf).nonzero(as_tuple=True)
    centre, size = predictions[box, :2], predictions[box, 2:4]
    boxes, kept_scores = torch.cat((centre - size / 2, centre + size / 2), dim=1), scores[box, label]
    keep = torchvision.ops.batched_nms(boxes, kept_scores, label, iou)[:max_det]
    return torch.cat((boxes[keep], kept_scores[keep, None], label[keep, None].float()), dim=1)


def row_set(rows: torch.Tensor) -> set[tuple[float, ...]]:
    return {tuple(np.round(row.tolist(), 2)) for row in rows}


@pytest.mark.slow
def test_yolov5n_graph_nms_equals_ours_on_coco128_images_and_scores_the_same_map(yolov5n_exports, tmp_path,
                                                                                  coco128_workdir):
    """The graph keeps what NMS in exact coordinates keeps. Ours (yolov5's) moves each class by class * 7680 px
    into one call, where float32 rounds boxes by up to 0.06 px, so a pair at the IoU threshold may fall the other
    way: 12 of 3,267 rows of these 16 images differ (2026-12-05); the mAP is the same."""
    batch = []
    for image_path in sorted((COCO128 / "images" / "train2017").glob("*.jpg"))[:16]:
        fitted, _, _ = letterbox(cv2.imread(str(image_path)), (640, 640))
        batch.append(np.ascontiguousarray(fitted[:, :, ::-1].transpose(2, 0, 1)))
    tensor = torch.from_numpy(np.stack(batch)).float() / 255
    predictions = torch.from_numpy(onnx_session(yolov5n_exports["plain"]).run(None, {"images": tensor.numpy()})[0])
    ours = non_max_suppression(predictions, 0.001, 0.6, max_det=300, **CPU.nms_arguments())
    detections, count = graph_nms_rows(yolov5n_exports["nms"], tensor)
    differing, total = 0, 0
    for rows, kept, image_predictions, our_rows in zip(detections, count, predictions, ours):
        graph_rows = torch.from_numpy(rows[:kept])
        assert_same_rows(graph_rows, per_class_nms(image_predictions, 0.001, 0.6, 300), 1e-3)
        assert kept == len(our_rows)
        differing, total = differing + len(row_set(graph_rows) - row_set(our_rows)), total + int(kept)
    assert total > 3000 and differing <= total // 100
    scores = {}
    for kind, path in yolov5n_exports.items():
        scores[kind] = val.validate(val.parse_args(
            ["--weights", str(path), "--data", "coco128.yaml", "--batch-size", "16", "--device", "cpu",
             "--project", str(tmp_path / kind), "--no-progress"])).metrics
    assert scores["nms"].map50_95 == pytest.approx(scores["plain"].map50_95, abs=1e-4)
    assert scores["nms"].map50 == pytest.approx(scores["plain"].map50, abs=1e-4)
