"""A TorchScript export in val and predict: its metadata, static batches cut and padded, dynamic shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from detect import backend as backends
from detect.errors import UserError
from detect.inference.model import load_inference_model
from tests.exporters.helpers import IMGSZ, NAMES, eager, run_export

CPU = backends.select("cpu")


def test_a_static_torchscript_takes_its_batch_and_shape(weights, tmp_path):
    path = run_export(weights, tmp_path, "--batch-size", "2")["torchscript"]
    model = load_inference_model(path, CPU)
    assert model.names == tuple(NAMES) and model.stride == 32 and model.fixed_shape == IMGSZ and model.batch == 2
    images = torch.rand(3, 3, *IMGSZ)  # a full batch of 2, then 1 padded to 2
    assert np.abs(model(images).numpy() - eager(weights, images)).max() < 1e-3
    with pytest.raises(UserError, match="takes 96x128 images only"):
        model(torch.rand(1, 3, 64, 64))


def test_a_dynamic_torchscript_takes_any_batch_and_multiple_of_the_stride(weights, tmp_path):
    model = load_inference_model(run_export(weights, tmp_path, "--dynamic")["torchscript"], CPU)
    assert model.fixed_shape is None and model.batch is None
    images = torch.rand(3, 3, 64, 160)
    assert np.abs(model(images).numpy() - eager(weights, images)).max() < 1e-3


def test_a_torchscript_without_our_metadata_is_named(tmp_path):
    path = tmp_path / "bare.torchscript"
    torch.jit.save(torch.jit.script(torch.nn.Identity()), str(path))
    with pytest.raises(UserError, match="no detect.json inside"):
        load_inference_model(path, CPU)
    with pytest.raises(UserError, match="--half does not apply"):
        load_inference_model(path, CPU, half=True)
