"""The OpenVINO exporter: the IR beside the ONNX carries its metadata and computes what the ONNX computes, static,
dynamic and with fp16 weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from detect.backend.openvino_runtime import import_openvino
from detect.exporters.openvino_export import export_openvino
from detect.exporters.torchscript import ExportSettings
from tests.exporters.helpers import IMGSZ, onnx_outputs, run_export

pytest.importorskip("openvino", reason='OpenVINO is optional (pip install "detect-trainer[openvino]")')


def compiled(xml: Path):
    """The IR compiled for the CPU in f32 (the plugin's default is bf16 where the CPU has it)."""
    openvino = import_openvino("the test")
    return openvino.Core().compile_model(str(xml), "CPU",
                                         {openvino.properties.hint.inference_precision: openvino.Type.f32})


def test_the_ir_carries_the_onnx_metadata_and_equals_its_outputs(static_exports):
    onnx_path = static_exports["onnx"]
    xml = export_openvino(onnx_path, ExportSettings())
    assert xml == onnx_path.parent / "tiny_openvino_model" / "tiny.xml" and xml.with_suffix(".bin").is_file()
    rt_info = import_openvino("the test").Core().read_model(str(xml)).get_rt_info()["detect"]
    carried = {key: json.loads(value.astype(str)) for key, value in rt_info.items()}
    assert carried == {prop.key: json.loads(prop.value) for prop in onnx.load(str(onnx_path)).metadata_props}
    assert carried["names"] == ["cat", "dog", "bird"] and carried["stride"] == 32
    model = compiled(xml)
    assert list(model.input(0).get_shape()) == [1, 3, *IMGSZ]
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(1))
    assert np.abs(model(images.numpy())[0] - onnx_outputs(onnx_path, images)).max() < 1e-4


def test_a_dynamic_ir_takes_any_batch_and_size(weights, tmp_path):
    onnx_path = run_export(weights, tmp_path, "--include", "onnx", "--dynamic")["onnx"]
    model = compiled(export_openvino(onnx_path, ExportSettings(dynamic=True)))
    assert model.input(0).get_partial_shape().is_dynamic
    for shape in ((3, 3, *IMGSZ), (2, 3, 64, 160)):
        images = torch.rand(*shape, generator=torch.Generator().manual_seed(2))
        assert np.abs(model(images.numpy())[0] - onnx_outputs(onnx_path, images)).max() < 1e-4


def test_half_stores_fp16_weights_and_stays_close(static_exports, tmp_path):
    onnx_path = static_exports["onnx"]
    full = export_openvino(onnx_path, ExportSettings())
    half_onnx = tmp_path / onnx_path.name  # a copy, so that each IR has a folder of its own
    shutil.copy(onnx_path, half_onnx)
    half = export_openvino(half_onnx, ExportSettings(half=True))
    ratio = half.with_suffix(".bin").stat().st_size / full.with_suffix(".bin").stat().st_size
    assert 0.45 < ratio < 0.55, ratio
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(3))
    got, expected = compiled(half)(images.numpy())[0], onnx_outputs(onnx_path, images)
    np.testing.assert_allclose(got[..., :4], expected[..., :4], rtol=0, atol=0.5)  # pixels, fp16 steps <= 0.125
    np.testing.assert_allclose(got[..., 4:], expected[..., 4:], rtol=0, atol=5e-3)
