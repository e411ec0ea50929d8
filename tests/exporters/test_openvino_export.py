"""The OpenVINO exporter: the IR beside the ONNX carries its metadata and computes what the ONNX computes (static,
dynamic, fp16, NMS in the graph); yolov5n's IR scores the ONNX's mAP on coco128."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from detect import backend as backends
from detect import export, val
from detect.backend.openvino_runtime import import_openvino, shared_core
from detect.exporters.openvino_export import export_openvino
from detect.exporters.torchscript import ExportSettings
from detect.inference.exported import GraphNms
from detect.inference.runtimes.openvino_model import OpenVinoInference
from tests.exporters.helpers import IMGSZ, onnx_outputs, onnx_session, run_export
from tests.exporters.test_graph_nms import assert_same_rows
from tests.shared_data import YOLOV5N, needs_shared

# find_spec, not importorskip: a bare `import openvino` sends its telemetry (detect/backend/openvino_runtime.py).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                                reason='OpenVINO is optional (pip install "detect-trainer[openvino]")')
CPU = backends.select("cpu")


def compiled(xml: Path):
    """The IR compiled for the CPU in f32 (the plugin's default is bf16 where the CPU has it)."""
    openvino = import_openvino("the test")
    return shared_core("the test").compile_model(str(xml), "CPU",
                                                 {openvino.properties.hint.inference_precision: openvino.Type.f32})


def test_the_ir_carries_the_onnx_metadata_and_equals_its_outputs(static_exports):
    onnx_path = static_exports["onnx"]
    xml = export_openvino(onnx_path, ExportSettings())
    assert xml == onnx_path.parent / "tiny_openvino_model" / "tiny.xml" and xml.with_suffix(".bin").is_file()
    rt_info = shared_core("the test").read_model(str(xml)).get_rt_info()["detect"]
    carried = {key: json.loads(value.astype(str)) for key, value in rt_info.items()}
    assert carried == {prop.key: json.loads(prop.value) for prop in onnx.load(str(onnx_path)).metadata_props}
    assert carried["names"] == ["cat", "dog", "bird"] and carried["stride"] == 32
    model = compiled(xml)
    assert list(model.input(0).get_shape()) == [1, 3, *IMGSZ]
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(1))
    assert np.abs(model(images.numpy())[0] - onnx_outputs(onnx_path, images)).max() < 1e-4


def test_a_dynamic_ir_takes_any_batch_and_size(weights, tmp_path):
    onnx_path = run_export(weights, tmp_path, "--include", "onnx", "--dynamic")["onnx"]
    xml = export_openvino(onnx_path, ExportSettings(dynamic=True))
    model = compiled(xml)
    assert model.input(0).get_partial_shape().is_dynamic
    for shape in ((3, 3, *IMGSZ), (2, 3, 64, 160)):
        images = torch.rand(*shape, generator=torch.Generator().manual_seed(2))
        assert np.abs(model(images.numpy())[0] - onnx_outputs(onnx_path, images)).max() < 1e-4
    inference = OpenVinoInference(xml, CPU)  # its dynamic dimensions are no fixed batch or shape
    assert inference.batch is None and inference.fixed_shape is None
    assert np.abs(inference(images).numpy() - onnx_outputs(onnx_path, images)).max() < 1e-4


def test_the_cli_writes_the_onnx_and_its_ir_and_half_makes_both_fp16(weights, tmp_path):
    full = run_export(weights, tmp_path / "full", "--include", "openvino")
    half = run_export(weights, tmp_path / "half", "--include", "openvino", "--half")
    assert set(full) == set(half) == {"onnx", "openvino"}
    assert half["openvino"] == tmp_path / "half" / "tiny_openvino_model" / "tiny.xml"
    ratio = half["openvino"].with_suffix(".bin").stat().st_size / full["openvino"].with_suffix(".bin").stat().st_size
    assert 0.45 < ratio < 0.55, ratio
    model = compiled(half["openvino"])
    assert model.input(0).get_element_type().get_type_name() == "f16"
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(3))
    got = model(images.numpy().astype(np.float16))[0].astype(np.float32)
    expected = onnx_outputs(full["onnx"], images)
    np.testing.assert_allclose(got[..., :4], expected[..., :4], rtol=0, atol=0.5)  # pixels, fp16 steps <= 0.125
    np.testing.assert_allclose(got[..., 4:], expected[..., 4:], rtol=0, atol=5e-3)


def test_nms_in_the_graph_gives_the_onnx_detections(weights, tmp_path):
    # test_graph_nms's thresholds: with them the tiny model's scores have no ties at the max_det cut.
    written = run_export(weights, tmp_path, "--include", "openvino", "--nms", "--batch-size", "2",
                         "--conf-thres", "0.002", "--iou-thres", "0.5", "--max-det", "20")
    images = torch.rand(2, 3, *IMGSZ, generator=torch.Generator().manual_seed(1))
    outputs = compiled(written["openvino"])(images.numpy())
    detections, count = outputs[0], outputs[1]
    expected, expected_count = onnx_session(written["onnx"]).run(None, {"images": images.numpy()})
    assert detections.shape == (2, 20, 6) and count.tolist() == expected_count.tolist()
    for rows, kept, reference in zip(detections, count, expected):
        assert 0 < kept <= 20 and (rows[kept:] == -1).all()
        assert_same_rows(torch.from_numpy(rows[:kept]), torch.from_numpy(reference[:kept]), 1e-3)
    assert OpenVinoInference(written["openvino"], CPU).nms == GraphNms(0.002, 0.5, 20, agnostic=False)


@pytest.mark.slow
@needs_shared
def test_yolov5n_ir_scores_the_onnx_map_on_coco128(tmp_path, coco128_workdir):
    # At 320 (8 s against 31-35 s at 640, where both give 0.359: docs/deploy.md's table).
    written = export.export(export.parse_args(["--weights", str(YOLOV5N), "--include", "onnx", "openvino",
                                               "--batch-size", "16", "--imgsz", "320", "--output-dir", str(tmp_path)]))
    scores = {}
    for kind in ("onnx", "openvino"):
        weights = written[kind].parent if kind == "openvino" else written[kind]  # the folder, as users give it
        scores[kind] = val.validate(val.parse_args(
            ["--weights", str(weights), "--data", "coco128.yaml", "--batch-size", "16", "--imgsz", "320",
             "--device", "cpu", "--project", str(tmp_path / kind), "--no-progress"])).metrics
    # static, square inputs at 320 (2026-12-06; tests/test_export.py has 0.359 at 640)
    assert scores["onnx"].map50_95 == pytest.approx(0.2975, abs=0.002)
    assert scores["openvino"].map50_95 == pytest.approx(scores["onnx"].map50_95, abs=0.001)
    assert scores["openvino"].map50 == pytest.approx(scores["onnx"].map50, abs=0.001)
