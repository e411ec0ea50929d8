"""yolov5's PyTorch Hub tutorial on our hub, its snippets as written (a tiny untrained model, small images): the
results' print, show, save, crop, render, pandas, tolist, ims, box formats and len, and the model's NMS settings."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from detect.hub import HubModel, HubResults
from detect.inference.annotate import annotate
from detect.inference.predict_outputs import crop_box
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import model_state

REPO = Path(__file__).resolve().parent
NAMES = ["../person", "a/b", "bird"]  # class names that are no file names: crops go to '.._person' and 'a_b'
SIZE = 64


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> HubModel:
    torch.manual_seed(0)
    network = build_model("yolov5n.yaml", num_classes=3, names=NAMES)
    weights = save_checkpoint(tmp_path_factory.mktemp("weights") / "tiny.pt", {"model": model_state(network)})
    loaded = torch.hub.load(str(REPO.parent), "custom", path=str(weights), source="local", device="cpu")
    loaded.conf = 0.001  # an untrained model scores every box near its prior
    return loaded


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("images")
    noise = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    cv2.imwrite(str(folder / "zidane.jpg"), noise)
    cv2.imwrite(str(folder / "bus.jpg"), noise[:, ::-1])
    return folder / "zidane.jpg", folder / "bus.jpg"


@pytest.fixture
def results(model, images) -> HubResults:
    zidane, bus = images
    im1 = Image.open(zidane)  # PIL image
    im2 = cv2.imread(str(bus))[..., ::-1]  # OpenCV image (BGR to RGB)
    return model([im1, im2], size=SIZE)


def test_the_tutorials_results_attributes(results, images):
    assert len(results) == 2 and results.files == ["zidane.jpg", "image1.jpg"]
    assert all(image.shape == (48, 80, 3) for image in results.ims)
    np.testing.assert_array_equal(results.ims[1], cv2.imread(str(images[1]))[..., ::-1])  # RGB, as yolov5's
    for key in ("xyxy", "xywh", "xyxyn", "xywhn"):
        assert [rows.shape[1] for rows in getattr(results, key)] == [6, 6]
    frame = results.pandas().xyxy[0]
    assert len(frame) == len(results.xyxy[0]) > 0
    assert frame.sort_values("xmin")["xmin"].is_monotonic_increasing  # the tutorial's sorting snippet
    assert frame.to_json(orient="records").startswith('[{"xmin":')


def test_show_without_a_display_saves_and_says_where(results, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    assert results.show() is None
    assert sorted(path.name for path in (tmp_path / "runs/hub/exp").iterdir()) == ["image1.jpg", "zidane.jpg"]
    assert caplog.messages[-1] == ("results.show(): no display (DISPLAY is not set), so the 2 images went to "
                                   "runs/hub/exp instead")


def test_show_with_a_display_opens_each_image(results, monkeypatch):
    monkeypatch.setenv("DISPLAY", ":0")
    shown = []
    monkeypatch.setattr(Image.Image, "show", lambda image, title=None: shown.append((title, image.size)))
    results.show(labels=False)
    assert shown == [("zidane.jpg", (80, 48)), ("image1.jpg", (80, 48))]


def test_render_draws_on_ims_and_returns_them(results):
    plain = [image.copy() for image in results.ims]
    rendered = results.render()
    assert rendered is results.ims and len(rendered) == 2
    for image, before, bgr, detections in zip(rendered, plain, results._images, results._found):
        assert image.dtype == np.uint8 and image.shape == before.shape and not np.array_equal(image, before)
        np.testing.assert_array_equal(image, annotate(bgr, detections)[..., ::-1])
    np.testing.assert_array_equal(results.render()[0], rendered[0])  # drawn afresh, not twice
    assert not np.array_equal(results.render(labels=False)[0], rendered[0])


def test_crop_save_writes_each_detection_under_its_safe_class_folder(results, tmp_path):
    crops = results.crop(save=True, save_dir=tmp_path / "exp")
    assert len(crops) == sum(len(rows) for rows in results.xyxy)
    assert set(crops[0]) == {"box", "conf", "cls", "label", "im"}
    first = crops[0]  # yolov5 goes through each image's detections from the lowest confidence
    x1, y1, x2, y2, conf, cls = results.xyxy[0][-1]
    assert [float(side) for side in first["box"]] == [float(x1), float(y1), float(x2), float(y2)]
    assert first["conf"] == conf and first["cls"] == cls and first["label"] == f"{NAMES[int(cls)]} {conf:.2f}"
    left, top, right, bottom = crop_box([float(x1), float(y1), float(x2), float(y2)], 48, 80)
    np.testing.assert_array_equal(first["im"], results._images[0][top:bottom, left:right])  # BGR, as yolov5's
    written = sorted(path.relative_to(tmp_path / "exp") for path in (tmp_path / "exp").rglob("*.jpg"))
    assert len(written) == len(crops)
    assert {path.parts[:2] for path in written} <= {("crops", ".._person"), ("crops", "a_b"), ("crops", "bird")}
    zidane_crops = [path for path in written if path.name.startswith("zidane")]
    per_class = {folder: sum(path.parts[1] == folder for path in zidane_crops) for folder in (".._person", "a_b", "bird")}
    assert all(Path("crops", folder, f"zidane{number if number > 1 else ''}.jpg") in written
               for folder, count in per_class.items() for number in range(1, count + 1))
    assert results.crop(save=True, save_dir=tmp_path / "exp") and (tmp_path / "exp2" / "crops").is_dir()


def test_crop_without_save_writes_nothing(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(results.crop(save=False)) == sum(len(rows) for rows in results.xyxy)
    assert list(tmp_path.iterdir()) == []


def test_tolist_gives_one_result_per_image(results):
    singles = results.tolist()
    assert [len(single) for single in singles] == [1, 1] and all(isinstance(s, HubResults) for s in singles)
    for single, rows, name in zip(singles, results.xyxy, results.files):
        torch.testing.assert_close(single.xyxy[0], rows)
        assert single.files == [name] and single.names == results.names


@pytest.fixture
def settings(model):
    """The tutorial's model settings block, then back to the defaults but conf."""
    yield model
    for name in ("iou", "agnostic", "multi_label", "classes", "max_det", "amp"):
        vars(model).pop(name, None)


def test_the_tutorials_settings_are_honoured(settings, images):
    model = settings
    single = model(images[0], size=SIZE).xyxy[0]
    model.multi_label = True  # NMS multiple labels per box
    several = model(images[0], size=SIZE).xyxy[0]
    assert len(several) > len(single) and model.detector.settings.multi_label
    boxes = several[:, :4].tolist()
    assert any(boxes.count(box) > 1 for box in boxes)  # a box once per class above conf
    model.multi_label, model.amp = False, True  # AMP: autocast on an accelerator; the CPU stays fp32 as yolov5's
    torch.testing.assert_close(model(images[0], size=SIZE).xyxy[0], single)
    model.classes, model.max_det, model.agnostic, model.iou = [1, 2], 3, True, 0.5
    kept = model(images[0], size=SIZE).xyxy[0]
    assert len(kept) == 3 and set(kept[:, 5].tolist()) <= {1.0, 2.0}
