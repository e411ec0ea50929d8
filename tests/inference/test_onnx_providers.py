"""An .onnx runs on the execution provider of the chosen device: onnxruntime's CANN provider on an Ascend backend
(the provider list and the session are stood in: no onnxruntime-cann build here), one line when it is missing."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
import torch

from detect import backend as backends
from detect.errors import UserError
from detect.inference.model import load_inference_model
from tests.exporters.helpers import IMGSZ, eager, run_export, tiny_weights
from tests.npu_standin import npu_backend

CANN = "CANNExecutionProvider"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    weights = tiny_weights(folder)
    return weights, run_export(weights, folder, "--include", "onnx")["onnx"]


def stand_in_cann(monkeypatch) -> list:
    """onnxruntime as the onnxruntime-cann wheel shows itself: CANN listed first; sessions asked for it run on the
    CPU provider here. Returns the providers each session was asked for."""
    asked, real_session = [], onnxruntime.InferenceSession

    def session(path, options=None, providers=None):
        asked.append(providers)
        created = real_session(path, options, providers=["CPUExecutionProvider"])
        created.get_providers = lambda: [CANN, "CPUExecutionProvider"]
        return created

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [CANN, "CPUExecutionProvider"])
    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    return asked


def test_an_ascend_backend_runs_the_onnx_on_the_cann_provider(exported, monkeypatch, caplog):
    weights, path = exported
    asked = stand_in_cann(monkeypatch)
    with caplog.at_level("INFO"):
        model = load_inference_model(path, npu_backend(monkeypatch))
    assert asked == [[(CANN, {"device_id": 0})]]  # CANN only: no silent CPU fallback for the whole graph
    assert f"runs in onnxruntime on {CANN}" in caplog.text
    images = torch.rand(1, 3, *IMGSZ)
    assert np.abs(model(images).numpy() - eager(weights, images)).max() < 1e-3


def test_a_missing_provider_is_one_line_naming_the_package_and_the_cpu_choice(exported, monkeypatch):
    _, path = exported
    backend = npu_backend(monkeypatch)  # the plain onnxruntime wheel: CPU only
    with pytest.raises(UserError, match=r"needs onnxruntime's CANNExecutionProvider, .* pip install "
                                        r"onnxruntime-cann .* or run it with --device cpu"):
        load_inference_model(path, backend)
    cpu_model = load_inference_model(path, backends.select("cpu"))
    assert cpu_model.session.get_providers() == ["CPUExecutionProvider"]
