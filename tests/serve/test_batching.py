"""The batcher and the served model in one process: images of other input shapes never share a batch, so each gets
predict's answer for it alone, from the .pt and from a dynamic ONNX alike."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from detect.inference.detector import Detector, PredictSettings
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.stored import TrainedWith
from detect.models.weights import model_state
from tests.serve.test_serve import IMAGES, LOW_CONF, assert_same_rows, predicted

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")


@pytest.mark.parametrize("kind", ["pt", "onnx"])
def test_mixed_shapes_run_in_batches_of_their_own_and_answer_as_predict(kind, weights, tmp_path):
    from detect.serve.batcher import Batcher
    from detect.serve.engine import ServedModel, Thresholds
    from detect.serve.metrics import Metrics
    from detect.serve.settings import ServeSettings
    from tests.exporters.helpers import run_export

    path = weights if kind == "pt" else run_export(weights, tmp_path, "--include", "onnx", "--dynamic")["onnx"]
    model = ServedModel(ServeSettings(weights=str(path), imgsz=(128,)))
    assert model.describe()["format"] == {"pt": "pytorch", "onnx": "onnx"}[kind]  # the runtime says its format
    # At 128, astronaut.jpg is 128x128 in; chelsea.jpg and coffee.jpg are 96x128.
    names = ("chelsea.jpg", "astronaut.jpg", "coffee.jpg", "chelsea.jpg")
    prepared = [model.prepare(IMAGES[name]) for name in names]

    async def burst() -> list:
        batcher = Batcher(model.run, 4, 300, Metrics(4))
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(image, Thresholds(LOW_CONF, 0.45, 1000))
                                          for image in prepared))
        finally:
            await batcher.stop()

    answers = [found for found, _waited in asyncio.run(burst())]
    assert [found.batch_size for found in answers] == [3, 1, 3, 3]
    detector = Detector(path, "cpu", PredictSettings(imgsz=(128, 128), conf_threshold=LOW_CONF))
    for name, found in zip(names, answers):
        rows = found.rows.numpy().astype(np.float64)
        assert len(rows) > 0, name
        assert_same_rows(rows[np.lexsort(rows.T[::-1])], predicted(detector, IMAGES[name]))


def test_a_sliced_service_answers_as_sliced_predict_and_refuses_past_the_window_bound(weights):
    from detect.inference.slicing import SliceSettings
    from detect.serve.engine import ServedModel, Thresholds
    from detect.serve.settings import ServeSettings
    from detect.serve.uploads import Refused

    model = ServedModel(ServeSettings(weights=str(weights), imgsz=(128,), slice=128, max_windows=20))
    image = IMAGES["chelsea.jpg"]  # 451x300: 5 x 3 windows of 128 px
    (found,) = model.run([model.prepare(image)], [Thresholds(LOW_CONF, 0.45, 1000)])
    detector = Detector(weights, "cpu", PredictSettings(imgsz=(128, 128), conf_threshold=LOW_CONF,
                                                        slicing=SliceSettings(128, max_windows=20)))
    rows = found.rows.numpy().astype(np.float64)
    assert len(rows) > 0 and found.batch_size == 1 and found.windows == 15
    assert_same_rows(rows[np.lexsort(rows.T[::-1])], predicted(detector, image))
    with pytest.raises(Refused) as refused:
        model.prepare(IMAGES["astronaut.jpg"])  # 512x512: 5 x 5 windows
    assert refused.value.status == 413 and "needs 25 windows of 128 px" in refused.value.reason


def test_the_service_runs_at_the_size_the_checkpoint_was_trained_at(tmp_path):
    from detect.serve.engine import ServedModel
    from detect.serve.settings import ServeSettings

    model = build_model("yolov5n.yaml", num_classes=3)
    trained = save_checkpoint(tmp_path / "best.pt", {"model": model_state(model, TrainedWith(96, "three.yaml"))})
    served = ServedModel(ServeSettings(weights=str(trained)))
    assert served.describe()["imgsz"] == [96, 96]
    assert str(served.detector.input_size) == "96 px, the size the model was trained at"
    assert ServedModel(ServeSettings(weights=str(trained), imgsz=(128,))).describe()["imgsz"] == [128, 128]
