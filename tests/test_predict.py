"""`python -m detect.predict` and the Detector API: folders with a corrupt file, videos, boxes back in original pixels,
the exported ONNX, the run folder's files and one-line errors."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from detect import export, predict
from detect.data.dataset_plots import class_colour
from detect.inference.annotate import annotate
from detect.inference.detector import Detections, Detector, PredictSettings
from detect.inference.media import Frame
from detect.inference.predict_outputs import OutputSettings, PredictOutputs, crop_box, display_problem, predict_frames
from detect.inference.sample_images import SAMPLES_DIR, sample_images
from detect.inference.sources import Source
from detect.inference.streams import stream_name
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.stored import TrainedWith
from detect.models.weights import model_state
from tests.inference.stream_server import StreamServer

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


def write_clip(path: Path, height: int, width: int, frames: int = 7) -> Path:
    """A 10 fps MJPG video of `frames` different pictures."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (width, height))
    for index in range(frames):
        writer.write(picture(height, width, index))
    writer.release()
    return path


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
    clip = write_clip(tmp_path / "clip.avi", 64, 96)
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

    names, stride, fixed_shape, nms = tuple(NAMES), 32, None, None

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


def test_predict_and_export_take_the_size_the_checkpoint_was_trained_at_and_the_export_keeps_it(tmp_path, caplog):
    model = build_model("yolov5n.yaml", num_classes=3, names=NAMES)
    trained = save_checkpoint(tmp_path / "best.pt", {"model": model_state(model, TrainedWith(96, "three.yaml"))})
    cv2.imwrite(str(tmp_path / "in.png"), picture(192, 256, 1))
    with caplog.at_level(logging.INFO, logger="detect"):
        predict.run(weights=str(trained), source=str(tmp_path / "in.png"), device="cpu", project=str(tmp_path / "runs"))
        onnx = export.run(weights=str(trained), include=["onnx"], dynamic=True, output_dir=str(tmp_path))["onnx"]
    assert f"{trained} at 96 px, the size the model was trained at" in caplog.messages
    assert any("in.png: 96x96 " in message for message in caplog.messages)  # 256x192 fitted into 96, not 640
    assert f"exporting {trained} at 96 px, the size the model was trained at" in caplog.messages
    assert f"check it: python -m detect.val --weights {onnx} --data three.yaml --imgsz 96" in caplog.messages
    exported = Detector(onnx, "cpu")
    assert exported.model.fixed_shape is None and exported.settings.imgsz == (96, 96)
    assert str(exported.input_size) == "96 px, the size the model was exported at"
    assert Detector(onnx, "cpu", PredictSettings(imgsz=(64, 64))).settings.imgsz == (64, 64)


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
    (["--source", "99"], "--source 99: no camera at index 99"),
    (["--vid-stride", "0"], "--vid-stride: must be a positive integer"),
    (["--classes", "7"], "--classes 7: the model has 3 classes"),
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


def test_half_on_the_cpu_predicts_in_fp32_with_one_warning(weights, tmp_path, caplog):
    """The TTA tutorial's `detect.py --weights ... --img 832 --source data/images --augment` with --half, sizes
    shrunk: yolov5 runs it in fp32 on the CPU; so do we, with one warning, and the same detections."""
    cv2.imwrite(str(tmp_path / "x.jpg"), picture(64, 64, 1))
    with caplog.at_level(logging.WARNING, logger="detect"):
        half = run_predict(weights, tmp_path / "x.jpg", tmp_path / "runs", "--augment", "--half", "--save-txt")
    assert [r.message for r in caplog.records if "--half" in r.message] == [
        "--half: fp16 needs an accelerator; predicting in fp32 on the CPU (as yolov5 does)"]
    full = run_predict(weights, tmp_path / "x.jpg", tmp_path / "runs", "--augment", "--save-txt")
    assert (half / "labels" / "x.txt").read_text() == (full / "labels" / "x.txt").read_text() != ""


def test_without_a_source_it_predicts_on_the_sample_images(weights, tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        save_dir = predict.run(weights=str(weights), device="cpu", imgsz=64, project=str(tmp_path), nosave=True,
                               save_txt=True, conf_thres=0.001, max_det=2)
    assert f"no --source: predicting on the sample images in {SAMPLES_DIR}" in caplog.text
    assert sorted(p.stem for p in (save_dir / "labels").iterdir()) == [p.stem for p in sample_images()]


def test_vid_stride_predicts_on_every_nth_frame(weights, tmp_path):
    clip = write_clip(tmp_path / "clip.avi", 64, 64)
    save_dir = run_predict(weights, clip, tmp_path / "runs", "--save-txt", "--vid-stride", "3")
    assert sorted(p.name for p in (save_dir / "labels").iterdir()) == ["clip_2.txt", "clip_5.txt"]
    capture = cv2.VideoCapture(str(save_dir / "clip.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 2
    assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(10 / 3, abs=0.01)  # the clip keeps its length
    capture.release()


def test_save_crop_writes_each_detection_under_its_class_name(weights, tmp_path):
    image = picture(60, 80, 4)
    cv2.imwrite(str(tmp_path / "a.jpg"), image)
    save_dir = run_predict(weights, tmp_path / "a.jpg", tmp_path / "runs", "--save-crop", "--save-txt", "--nosave")
    rows = np.loadtxt(save_dir / "labels" / "a.txt", ndmin=2)
    crops = sorted((save_dir / "crops").rglob("*.jpg"))
    assert len(crops) == len(rows) == 5 and {p.parent.name for p in crops} <= set(NAMES)
    for cls in set(rows[:, 0].astype(int)):  # a.jpg, a2.jpg, a3.jpg, ... per class, as yolov5 numbers them
        count = int((rows[:, 0] == cls).sum())
        expected = ["a.jpg"] + [f"a{n}.jpg" for n in range(2, count + 1)]
        assert sorted(p.name for p in (save_dir / "crops" / NAMES[cls]).iterdir()) == sorted(expected)
    assert all(cv2.imread(str(p)).shape[0] <= 60 and cv2.imread(str(p)).shape[1] <= 80 for p in crops)


def test_crop_box_grows_the_box_as_yolov5_and_clips_it():
    # yolov5's save_one_box: sides x1.02 + 10 px about the centre, clipped, then whole pixels
    assert crop_box([10.0, 20.0, 50.0, 60.0], 100, 100) == (4, 14, 55, 65)
    assert crop_box([0.0, 90.0, 30.0, 100.0], 100, 100) == (0, 84, 35, 100)


def test_view_img_without_a_display_is_one_line_and_the_run_goes_on(weights, tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    cv2.imwrite(str(tmp_path / "a.jpg"), picture(64, 64, 2))
    with caplog.at_level(logging.INFO):
        save_dir = run_predict(weights, tmp_path / "a.jpg", tmp_path / "runs", "--view-img")
    lines = [r.getMessage() for r in caplog.records if "--view-img" in r.getMessage()]
    assert lines == ["--view-img: no display (DISPLAY is not set); frames are not shown"] or \
        lines == ["--view-img: this OpenCV has no GUI (opencv-python-headless); frames are not shown"]
    assert (save_dir / "a.jpg").is_file()


def test_display_problem_names_a_headless_opencv_first(monkeypatch):
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(cv2, "getBuildInformation", lambda: "  GUI:                           NONE\n")
    assert display_problem() == "this OpenCV has no GUI (opencv-python-headless)"
    monkeypatch.setattr(cv2, "getBuildInformation", lambda: "  GUI:                           GTK3\n")
    assert display_problem() is None
    monkeypatch.delenv("DISPLAY")
    assert display_problem() == "no display (DISPLAY is not set)" or not sys.platform.startswith("linux")


def test_a_live_stream_gives_a_video_and_its_end_one_line(weights, tmp_path, caplog):
    server = StreamServer(interval=0.02)
    server.streams["/cam"] = [15]
    server.start()
    try:
        with caplog.at_level(logging.INFO):
            save_dir = run_predict(weights, server.url("/cam"), tmp_path / "runs", "--save-txt")
    finally:
        server.stop()
    name = stream_name(server.url("/cam"))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stream 1/1 (frame ")]
    labels = sorted((save_dir / "labels").iterdir())
    assert lines and len(labels) == len(lines) and all(p.name.startswith(f"{name}_") for p in labels)
    assert f"stream 1/1 (frame 15) {server.url('/cam')}: " in lines[-1]  # the last frame is never skipped
    capture = cv2.VideoCapture(str(save_dir / f"{name}.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == len(lines)
    capture.release()
    assert caplog.text.count("ended after 15 frames") == 1


def test_an_image_url(weights, tmp_path, caplog):
    server = StreamServer()
    server.files["/img/bus.jpg"] = cv2.imencode(".jpg", picture(64, 64, 8))[1].tobytes()
    server.start()
    try:
        with caplog.at_level(logging.INFO):
            save_dir = run_predict(weights, server.url("/img/bus.jpg"), tmp_path / "runs")
    finally:
        server.stop()
    assert f"image 1/1 {server.url('/img/bus.jpg')}: 96x96 " in caplog.text
    assert sorted(p.name for p in save_dir.iterdir()) == ["bus.jpg"]


def interrupted(frames: list[Frame]):
    yield from frames
    raise KeyboardInterrupt


def test_ctrl_c_ends_a_live_source_with_its_video_whole_but_stops_a_file_source(weights, tmp_path, caplog):
    detector = Detector(weights, "cpu", PredictSettings(imgsz=(64, 64)))
    outputs = PredictOutputs(tmp_path, detector.names, OutputSettings())
    first = Frame(Path("cam"), picture(48, 64, 1), count=0, fps=10.0, stream=True)
    with caplog.at_level(logging.INFO):
        times, _ = predict_frames(Source(interrupted([first, replace(first, index=1)]), live=True), detector, outputs)
    outputs.finish()
    assert len(times) == 2 and "stopped (Ctrl-C)" in caplog.text
    capture = cv2.VideoCapture(str(tmp_path / "cam.mp4"))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 2
    capture.release()
    with pytest.raises(KeyboardInterrupt):
        predict_frames(Source(interrupted([])), detector, outputs)
