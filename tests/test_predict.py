"""`python -m detect.predict` and the Detector API: folders with a corrupt file, videos, boxes back in original pixels,
the exported ONNX, the run folder's files and one-line errors."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from detect import export, predict
from detect.data.plots import class_colour
from detect.inference.annotate import annotate
from detect.inference.detector import Detections, Detector, PredictSettings
from detect.models import build_model
from detect.models.checkpoint import save_checkpoint
from detect.models.weights import model_state

NAMES = ["cat", "dog", "bird"]
# An untrained model scores every box near its prior (about 0.002 to 0.03): a low threshold gives detections.
LOW = ["--conf-thres", "0.001", "--max-det", "5"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=3, names=NAMES)
    return save_checkpoint(tmp_path_factory.mktemp("weights") / "tiny.pt", {"model": model_state(model)})


def picture(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)


def run_predict(weights: Path, source: Path, project: Path, *options: str) -> Path:
    return predict.predict(predict.parse_args(["--weights", str(weights), "--source", str(source), "--device", "cpu",
                                           "--imgsz", "96", "--project", str(project), *LOW, *options]))


def test_a_folder_with_a_corrupt_image_writes_the_others_and_names_it(weights, tmp_path, caplog):
    source = tmp_path / "images"
    source.mkdir()
    for name, (height, width) in {"a.jpg": (60, 80), "b.png": (90, 40)}.items():
        cv2.imwrite(str(source / name), picture(height, width, len(name)))
    (source / "broken.jpg").write_bytes(b"\x00 not a jpeg")
    (source / "notes.txt").write_text("not media: a folder's other files are left alone")
    with caplog.at_level(logging.INFO):
        save_dir = run_predict(weights, source, tmp_path / "runs", "--save-txt")
    assert save_dir == tmp_path / "runs" / "exp"
    assert sorted(p.name for p in save_dir.iterdir() if p.is_file()) == ["a.jpg", "b.png"]
    assert cv2.imread(str(save_dir / "b.png")).shape == (90, 40, 3)  # drawn on the original, not the input
    assert sorted(p.name for p in (save_dir / "labels").iterdir()) == ["a.txt", "b.txt"]
    assert "image 1/3" in caplog.text and f"{source / 'a.jpg'}: 96x96 " in caplog.text
    assert f"{source / 'b.png'}: 96x64 " in caplog.text  # minimal rectangle: 90x40 fits 96x43 -> 96x64
    assert f"3/3 skipped: {source / 'broken.jpg'}: OSError: cannot decode the image" in caplog.text
    assert "1 unreadable file(s) skipped" in caplog.text


def test_a_video_gives_a_video_with_the_same_frame_count(weights, tmp_path):
    clip = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (96, 64))
    for index in range(7):
        writer.write(picture(64, 96, index))
    writer.release()
    save_dir = run_predict(weights, clip, tmp_path / "runs", "--save-txt", "--save-json")
    capture = cv2.VideoCapture(str(save_dir / "clip.mp4"))
    count = 0
    while capture.read()[0]:
        count += 1
    assert count == 7 and (capture.get(cv2.CAP_PROP_FRAME_WIDTH), capture.get(cv2.CAP_PROP_FRAME_HEIGHT)) == (96, 64)
    capture.release()
    assert sorted(p.name for p in (save_dir / "labels").iterdir()) == [f"clip_{i}.txt" for i in range(7)]
    rows = json.loads((save_dir / "predictions.json").read_text())
    assert {row["frame"] for row in rows} == set(range(7)) and {row["image_id"] for row in rows} == {"clip"}


def test_nosave_and_json_rows(weights, tmp_path):
    cv2.imwrite(str(tmp_path / "17.jpg"), picture(64, 64, 3))
    save_dir = run_predict(weights, tmp_path / "17.jpg", tmp_path / "runs", "--nosave", "--save-json")
    assert sorted(p.name for p in save_dir.iterdir()) == ["predictions.json"]
    rows = json.loads((save_dir / "predictions.json").read_text())
    assert len(rows) == 5 and all(row["image_id"] == 17 and row["category_id"] in (1, 2, 3) for row in rows)
    assert all(row["bbox"][2] >= 0 and row["bbox"][3] >= 0 for row in rows)


class WhiteBox:
    """A stand-in model that 'detects' the bounding box of the white pixels of each input, as class 1."""

    names, stride, fixed_shape = tuple(NAMES), 32, None

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        rows = torch.zeros(len(images), 1, 8)
        for index, image in enumerate(images):
            ys, xs = torch.nonzero(image.min(dim=0).values > 0.9, as_tuple=True)
            x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
            rows[index, 0] = torch.tensor([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, 1.0, 0.0, 1.0, 0.0])
        return rows


@pytest.mark.parametrize("size, box", [((150, 200), (40, 20, 80, 50)), ((300, 120), (10, 200, 110, 290))])
def test_boxes_come_back_in_original_pixels(weights, size, box):
    # A white rectangle on black: whatever the letterbox (scaled up or down, padded on either side), the box the
    # network sees maps back onto the rectangle.
    image = np.zeros((*size, 3), np.uint8)
    x1, y1, x2, y2 = box
    image[y1:y2, x1:x2] = 255
    detector = Detector(weights, "cpu", PredictSettings(imgsz=(256, 256)))
    detector.model = WhiteBox()
    found = detector([image, image[:, ::-1].copy()])
    np.testing.assert_allclose(found[0].boxes[0], box, atol=2.0)
    np.testing.assert_allclose(found[1].boxes[0], (size[1] - x2, y1, size[1] - x1, y2), atol=2.0)
    assert found[0].classes.tolist() == [1] and found[0].counts() == {"dog": 1}


def test_the_api_takes_arrays_and_paths_alike_and_filters_classes(weights, tmp_path):
    image = picture(70, 90, 5)
    path = tmp_path / "x.png"
    cv2.imwrite(str(path), image)
    detector = Detector(weights, "cpu", PredictSettings(imgsz=(96, 96), conf_threshold=0.001, max_det=20))
    from_array, from_path = detector([image, path])
    torch.testing.assert_close(from_array.rows, from_path.rows)
    assert from_array.boxes.shape == (len(from_array), 4) and from_array.boxes.dtype == np.float32
    assert (from_array.boxes[:, [0, 2]] <= 90).all() and (from_array.boxes[:, [1, 3]] <= 70).all()
    only_dogs = Detector(weights, "cpu", PredictSettings(imgsz=(96, 96), conf_threshold=0.001, classes=(1,)))
    assert set(only_dogs(image)[0].classes.tolist()) == {1}


def test_predict_runs_a_static_onnx_export_like_the_checkpoint(weights, tmp_path):
    onnx_path = export.export(export.parse_args(["--weights", str(weights), "--include", "onnx", "--imgsz", "64", "96",
                                              "--output-dir", str(tmp_path)]))["onnx"]
    image = picture(64, 96, 9)  # its minimal rectangle at imgsz 96 is the export's own 64x96: the same input
    settings = PredictSettings(imgsz=(96, 96), conf_threshold=0.001)
    from_pt, from_onnx = Detector(weights, "cpu", settings)(image)[0], Detector(onnx_path, "cpu", settings)(image)[0]
    assert from_onnx.input_size == (64, 96) and len(from_onnx) == len(from_pt) > 0
    torch.testing.assert_close(from_onnx.rows, from_pt.rows, atol=1e-3, rtol=0)


def test_annotate_draws_the_box_and_label_in_the_class_colour():
    rows = torch.tensor([[20.0, 30.0, 60.0, 70.0, 0.9, 2.0]])
    found = Detections(rows, tuple(NAMES), (96, 96))
    blank = np.zeros((96, 96, 3), np.uint8)
    drawn = annotate(blank, found, line_thickness=3)
    assert tuple(drawn[50, 20]) == class_colour(2) and tuple(drawn[70, 40]) == class_colour(2)
    label = drawn[6:27, 21:60]  # above the box: the filled label with white text ("bird 0.90")
    assert (label == class_colour(2)).all(axis=2).any() and (label == 255).all(axis=2).any()
    bare = annotate(blank, found, line_thickness=3, hide_labels=True)
    assert not bare[:26].any() and tuple(bare[50, 20]) == class_colour(2)  # a box, nothing above it
    assert not blank.any()  # the input is left alone


@pytest.mark.parametrize("options, message", [
    (["--source", "nowhere/*.jpg"], "no images or videos"),
    (["--source", "missing.jpg"], "no such file or folder"),
    (["--classes", "7"], "--classes 7: the model has 3 classes"),
    (["--half"], "--half needs an accelerator"),
    (["--imgsz", "1", "2", "3"], "one side or height width"),
    (["--conf-thres", "1.5"], "must be a number in [0, 1]"),
])
def test_user_errors_are_one_line_and_exit_2(weights, tmp_path, monkeypatch, capsys, options, message):
    monkeypatch.chdir(tmp_path)
    cv2.imwrite("x.jpg", picture(32, 32, 1))
    argv = ["--weights", str(weights), "--source", "x.jpg", "--device", "cpu", *options]
    try:
        code = predict.main(argv)
    except SystemExit as stopped:  # argparse's own errors stop in parse_args
        code = stopped.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
