"""The real yolov5n.pt served at 640: coco128 images sent at once come back with predict's detections for each alone,
those of one input shape in one batch, those of other shapes in batches of their own shape (padded into one batch,
000000000009.jpg's boxes moved by up to 14.7 px)."""

from __future__ import annotations

import concurrent.futures

import pytest

from detect.inference.detector import Detector, PredictSettings
from tests.serve.helpers import Server
from tests.serve.test_serve import assert_same_rows, predicted, rows_of
from tests.shared_data import COCO128, YOLOV5N, needs_shared

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytestmark = [pytest.mark.slow, needs_shared]

ONE_SHAPE = ("000000000025.jpg", "000000000030.jpg", "000000000034.jpg", "000000000071.jpg")  # all 448x640 inputs
MIXED = ("000000000009.jpg", "000000000036.jpg", "000000000049.jpg", "000000000025.jpg")  # 480x640, 640x512 twice,
# 448x640


def burst(server: Server, images: list[bytes]) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(len(images)) as pool:
        replies = list(pool.map(server.post, images))
    assert [reply.status for reply in replies] == [200] * len(images)
    return [reply.json() for reply in replies]


def test_yolov5n_answers_as_predict_in_one_batch(tmp_path):
    server = Server(YOLOV5N, tmp_path / "server.log", "--device", "cpu", "--max-batch", "4", "--max-wait-ms", "2000")
    detector = Detector(YOLOV5N, "cpu", PredictSettings())
    try:
        server.start()
        folder = COCO128 / "images" / "train2017"
        same = [(folder / name).read_bytes() for name in ONE_SHAPE]
        answers = burst(server, same)
        assert [answer["batch_size"] for answer in answers] == [4] * 4
        for image, answer in zip(same, answers):
            assert_same_rows(rows_of(answer), predicted(detector, image))
        mixed = [(folder / name).read_bytes() for name in MIXED]
        answers = burst(server, mixed)
        assert [answer["batch_size"] for answer in answers] == [1, 2, 2, 1]
        for image, answer in zip(mixed, answers):
            assert_same_rows(rows_of(answer), predicted(detector, image))
        assert server.terminate() == 0
    finally:
        server.stop()
