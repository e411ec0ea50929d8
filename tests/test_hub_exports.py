"""The export tutorial's hub line, torch.hub.load(P, "custom", path="yolov5s_openvino_model/"), and every format that
val and predict read (TorchScript, ONNX, an OpenVINO folder or .xml, an Ascend .om) through hub's `custom`: the same
results as the checkpoint's; what cannot load is one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from detect import backend as backends
from detect.errors import UserError
from detect.hub import HubResults
from tests import ais_bench_standin
from tests.exporters.helpers import IMGSZ, run_export
from tests.inference.test_om_model import export_om
from tests.npu_standin import npu_backend

REPO = Path(__file__).resolve().parent.parent
CONF = 0.004  # the tiny untrained model scores 0.005 at most here: a dozen boxes, none within 2e-4 of it
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None  # find_spec: a bare import sends telemetry


def hub_load(path: str | Path, **options) -> torch.nn.Module:
    model = torch.hub.load(str(REPO), "custom", path=str(path), source="local", device="cpu", **options)
    model.conf = CONF
    return model


@pytest.fixture(scope="module")
def exports(weights, tmp_path_factory) -> dict[str, Path]:
    formats = ["torchscript", "onnx"] + ["openvino"] * HAS_OPENVINO
    return run_export(weights, tmp_path_factory.mktemp("exports"), "--include", *formats)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    """An RGB image of the static exports' (h, w), so every format letterboxes it alike."""
    return np.random.default_rng(0).integers(0, 255, (*IMGSZ, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def expected(weights, image) -> torch.Tensor:
    rows = hub_load(weights)(image, size=max(IMGSZ)).xyxy[0]
    assert len(rows) > 3
    return rows


def assert_same_detections(results: HubResults, expected: torch.Tensor) -> None:
    """The same rows, in any order (boxes of equal score may swap between runtimes), within 0.01."""
    assert isinstance(results, HubResults) and results.names == {0: "cat", 1: "dog", 2: "bird"}
    got = results.xyxy[0]
    assert got.shape == expected.shape
    distance = (got[:, None, :] - expected[None, :, :]).abs().amax(dim=2)
    assert distance.amin(dim=1).max() < 1e-2 and distance.amin(dim=0).max() < 1e-2


@pytest.mark.parametrize("kind", ["torchscript", "onnx"])
def test_torchscript_and_onnx_load_through_custom(exports, image, expected, kind):
    assert_same_detections(hub_load(exports[kind])(image, size=max(IMGSZ)), expected)


@pytest.mark.skipif(not HAS_OPENVINO, reason='OpenVINO is optional (pip install "detect-trainer[openvino]")')
def test_the_export_tutorials_openvino_folder_loads_as_written(exports, image, expected, monkeypatch):
    xml = exports["openvino"]
    monkeypatch.chdir(xml.parent.parent)
    folder = f"{xml.parent.name}/"  # torch.hub.load(P, "custom", path="yolov5s_openvino_model/")
    assert folder == "tiny_openvino_model/"
    assert_same_detections(hub_load(folder)(image, size=max(IMGSZ)), expected)
    assert_same_detections(hub_load(xml)(image, size=max(IMGSZ)), expected)


def test_an_om_loads_through_custom_on_an_npu(weights, tmp_path, monkeypatch, image, expected):
    om = export_om(weights, tmp_path, monkeypatch)
    ais_bench_standin.install(monkeypatch, np.float32)
    backend = npu_backend(monkeypatch)
    monkeypatch.setattr(backends, "select", lambda *_, **__: backend)
    assert_same_detections(hub_load(om)(image, size=max(IMGSZ)), expected)


def test_what_an_export_cannot_do_in_the_hub_is_one_line(exports, tmp_path):
    with pytest.raises(UserError, match=r"autoshape=False returns a PyTorch model; an export loads with autoshape$"):
        hub_load(exports["onnx"], autoshape=False)
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match=r"plain is a folder: give a \.pt, \.om, \.onnx, \.torchscript, \.xml or an "
                                        r"OpenVINO <stem>_openvino_model folder$"):
        hub_load(tmp_path / "plain")


def test_an_image_file_goes_through_an_export_as_an_array_does(exports, image, expected, tmp_path):
    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), image[..., ::-1])  # lossless, BGR on disk
    assert_same_detections(hub_load(exports["onnx"])([path], size=max(IMGSZ)), expected)
