"""The Detector on a model object (a DetectionModel in memory, or a model already loaded) as through its file, and its
batch call: images prepared to one shape, one model call, each image's detections at its own thresholds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from detect import backend as backends
from detect.errors import UserError
from detect.inference.detector import Detector, PredictSettings
from detect.inference.model import load_inference_model
from detect.models.weights import load_model

# An untrained model scores every box near its prior (about 0.002 to 0.03): a low threshold gives detections.
SETTINGS = PredictSettings(imgsz=(96, 96), conf_threshold=0.001, max_det=30)


def pictures(count: int, height: int = 60, width: int = 90) -> list[np.ndarray]:
    generator = np.random.default_rng(3)
    return [generator.integers(0, 255, (height, width, 3), dtype=np.uint8) for _ in range(count)]


@pytest.fixture(scope="module")
def detector(weights) -> Detector:
    """The tiny checkpoint's Detector, loaded from its file."""
    return Detector(weights, "cpu", SETTINGS)


def test_a_model_in_memory_gives_the_boxes_of_its_file_and_is_left_as_it_was(weights, detector):
    model = load_model(weights).train()
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    image = pictures(1)[0]
    from_file = detector(image)[0]
    from_memory = Detector(model, "cpu", SETTINGS)(image)[0]
    assert len(from_file) > 0 and torch.equal(from_memory.rows, from_file.rows)
    assert model.training and any(isinstance(module, torch.nn.BatchNorm2d) for module in model.modules())
    assert all(torch.equal(tensor, state[name]) for name, tensor in model.state_dict().items())


def test_a_loaded_model_is_used_as_it_is(detector):
    cpu = backends.select("cpu")
    on_loaded = Detector(detector.model, "cpu", SETTINGS)
    image = pictures(1)[0]
    assert on_loaded.model is detector.model
    torch.testing.assert_close(on_loaded(image)[0].rows, detector(image)[0].rows)
    with pytest.raises(UserError, match="does not apply to a model already loaded"):
        load_inference_model(detector.model, cpu, half=True)


def test_the_batch_call_answers_each_image_as_alone_at_its_own_thresholds(detector):
    images = pictures(3)
    prepared = [detector.prepare(image) for image in images]
    assert {image.pixels.shape for image in prepared} == {(64, 96, 3)}  # each image's own input shape: one here
    outputs = detector.predict_batch(prepared)
    assert len(outputs) == len(images)
    dogs = dataclasses.replace(SETTINGS, classes=(1,), max_det=3)
    for index, image in enumerate(images):
        (found,) = detector.detections(outputs[index:index + 1], [prepared[index]])
        alone = detector(image)[0]
        assert found.input_size == alone.input_size == (64, 96) and len(found) == len(alone) > 0
        torch.testing.assert_close(found.rows, alone.rows, atol=1e-3, rtol=1e-4)
        (only_dogs,) = detector.detections(outputs[index:index + 1], [prepared[index]], dogs)
        assert 0 < len(only_dogs) <= 3 and set(only_dogs.classes.tolist()) == {1}
