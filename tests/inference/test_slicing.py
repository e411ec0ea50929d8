"""Sliced inference: one model call per batch of windows, boxes mapped back to the image, a box across a seam merged
once, the window bound, and plain predict's detections when one window covers the image."""

from __future__ import annotations

import logging

import cv2
import numpy as np
import pytest
import torch

from detect import backend as backends
from detect import predict
from detect.inference.detector import Detector, PredictSettings
from detect.inference.predictor import Predictor
from detect.inference.slicing import SlicedPredictor, SliceSettings, TooManyWindows
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import model_state
from tests.shared_data import COCO128, YOLOV5N, needs_shared

CPU = backends.select("cpu", amp=False)
NMS = {"conf_threshold": 0.25, "iou_threshold": 0.45, "max_det": 100}


class WhiteBoxes:
    """A stand-in model that sees perfectly: in each input, the box around its white pixels, class 0, score 0.9
    ((B, 1, 6) decoded rows; none where an input has no white pixel). Counts its calls."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        self.calls.append(tuple(images.shape))
        rows = torch.zeros(len(images), 1, 6)
        for index, image in enumerate(images):
            ys, xs = torch.nonzero(image[0] > 0.9, as_tuple=True)
            if len(xs):
                x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
                rows[index, 0] = torch.tensor([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, 0.9, 1.0])
        return rows


def white_image(height: int, width: int, boxes: list[tuple[int, int, int, int]]) -> np.ndarray:
    image = np.zeros((height, width, 3), np.uint8)
    for x1, y1, x2, y2 in boxes:
        image[y1:y2, x1:x2] = 255
    return image


class ManyBoxes:
    """A stand-in model that finds `count` small boxes of score 0.9 down the diagonal of each input, apart from each
    other and from every other window's ((B, count, 6) decoded rows)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        centres = 14.0 + 20 * torch.arange(self.count, dtype=torch.float32)
        rows = torch.stack([centres, centres, torch.full_like(centres, 8), torch.full_like(centres, 8),
                            torch.full_like(centres, 0.9), torch.ones_like(centres)], dim=1)
        return rows.expand(len(images), -1, -1).clone()


def sliced(model: WhiteBoxes | ManyBoxes, **settings) -> SlicedPredictor:
    return SlicedPredictor(Predictor(model), CPU, SliceSettings(**{"size": 128, "overlap": 0.25, **settings}), 32)


def test_a_box_across_a_seam_is_merged_once_where_nms_alone_keeps_both_halves():
    # windows start at x = 0, 91, 181, 272: the box (100 px wide) is cut in half by the seam of the first two, and no
    # window holds it whole; the halves overlap by 37 px, an IoU of 0.37, under NMS's 0.45
    image = white_image(300, 400, [(60, 20, 160, 50)])
    halves = sliced(WhiteBoxes(), merge="nms").detect(image, **NMS)
    assert sorted(halves[:, 0].tolist()) == [60, 91] and len(halves) == 2
    merged = sliced(WhiteBoxes(), merge="seam").detect(image, **NMS)
    assert merged[:, :4].tolist() == [[60, 20, 160, 50]] and merged[:, 4:].tolist() == [[pytest.approx(0.9), 0]]


def test_windows_go_through_the_model_a_batch_at_a_time_and_boxes_come_back_in_image_pixels():
    model = WhiteBoxes()
    found = sliced(model, batch_size=5, merge="seam").detect(white_image(300, 400, [(300, 230, 310, 245)]), **NMS)
    assert model.calls == [(5, 3, 128, 128), (5, 3, 128, 128), (2, 3, 128, 128)]  # 4 x 3 windows, batches of 5
    assert found[:, :4].tolist() == [[300, 230, 310, 245]]


def test_the_whole_image_is_one_more_input_when_asked():
    model = WhiteBoxes()
    found = sliced(model, whole=True, merge="seam").detect(white_image(256, 256, [(8, 8, 248, 248)]), **NMS)
    assert model.calls[-1] == (1, 3, 128, 128)  # the 256 px image fitted into one 128 px window
    assert len(found) == 1 and found[0, :4].tolist() == pytest.approx([8, 8, 248, 248], abs=2)  # the pieces in it


def test_max_det_caps_each_windows_detections_so_an_image_keeps_up_to_max_det_times_its_windows():
    predictor = sliced(ManyBoxes(5))
    found = predictor.detect(white_image(300, 400, []), **{**NMS, "max_det": 3})
    assert predictor.window_count(300, 400) == 12 and len(found) == 3 * 12  # 4 x 3 windows, 3 of 5 boxes kept in each
    whole = sliced(ManyBoxes(5), whole=True)
    assert whole.window_count(300, 400) == 13 and len(whole.detect(white_image(300, 400, []), **NMS)) == 5 * 12 + 5
    assert whole.window_count(100, 120) == 1  # one window holds the image: no whole-image pass beside it


def test_an_image_needing_more_windows_than_the_bound_is_refused_in_one_line():
    with pytest.raises(TooManyWindows) as raised:
        sliced(WhiteBoxes(), max_windows=11).detect(white_image(300, 400, []), **NMS)
    assert str(raised.value) == "400x300 needs 12 windows of 128 px at overlap 0.25, more than --max-windows 11"


@needs_shared
def test_one_window_over_the_image_is_plain_predict():
    image = cv2.imread(str(COCO128 / "images" / "train2017" / "000000000009.jpg"))  # 640x480: no resize at 640
    plain = Detector(YOLOV5N, "cpu", PredictSettings(imgsz=(640, 640)))(image)[0]
    one_window = Detector(YOLOV5N, "cpu", PredictSettings(imgsz=(640, 640), slicing=SliceSettings(640)))(image)[0]
    assert len(plain) >= 3 and torch.equal(plain.rows, one_window.rows)


def test_predict_says_how_many_windows_an_image_took_and_skips_one_over_the_bound_by_name(tmp_path, caplog):
    torch.manual_seed(0)
    weights = save_checkpoint(tmp_path / "tiny.pt", {"model": model_state(build_model("yolov5n.yaml", num_classes=3,
                                                                                        names=["a", "b", "c"]))})
    cv2.imwrite(str(tmp_path / "large.png"), white_image(700, 700, [(10, 10, 20, 20)]))
    cv2.imwrite(str(tmp_path / "small.png"), white_image(100, 100, [(10, 10, 20, 20)]))
    with caplog.at_level(logging.INFO):
        save_dir = predict.run(weights=str(weights), source=str(tmp_path / "*.png"), device="cpu", slice=320,
                               max_windows=4, project=str(tmp_path / "runs"))
    assert "large.png: 700x700 needs 9 windows of 320 px at overlap 0.2, more than --max-windows 4" in caplog.text
    assert (save_dir / "small.png").is_file() and not (save_dir / "large.png").exists()
    with caplog.at_level(logging.INFO):
        predict.run(weights=str(weights), source=str(tmp_path / "*.png"), device="cpu", slice=320,
                    project=str(tmp_path / "runs"))
    assert "large.png: 9 windows of 320x320 " in caplog.text and "small.png: 100x100 " in caplog.text
