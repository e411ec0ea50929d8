"""The ONNX exporter: it checks, and equals the eager model in onnxruntime, static and dynamic, simplified and fp16."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import torch

from tests.exporters.helpers import IMGSZ, eager, onnx_outputs, run_export


def test_onnx_passes_the_checker_and_equals_pytorch_at_batch_1(weights, static_exports):
    path = static_exports["onnx"]
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")] == [12]
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, *IMGSZ]
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(1))
    expected = eager(weights, images)
    assert expected.shape == (1, 3 * sum((IMGSZ[0] // s) * (IMGSZ[1] // s) for s in (8, 16, 32)), 8)
    assert np.abs(onnx_outputs(path, images) - expected).max() < 1e-4


def test_dynamic_onnx_equals_pytorch_at_batch_3_and_another_size(weights, tmp_path):
    path = run_export(weights, tmp_path, "--include", "onnx", "--dynamic")["onnx"]
    onnx.checker.check_model(onnx.load(str(path)))
    for shape in ((3, 3, *IMGSZ), (2, 3, 64, 160)):
        images = torch.rand(*shape, generator=torch.Generator().manual_seed(3))
        assert np.abs(onnx_outputs(path, images) - eager(weights, images)).max() < 1e-4


def test_simplify_keeps_outputs_with_fewer_nodes_and_standard_operators(weights, static_exports, tmp_path):
    path = run_export(weights, tmp_path, "--include", "onnx", "--simplify", "--opset", "12")["onnx"]
    simplified, plain = onnx.load(str(path)), onnx.load(str(static_exports["onnx"]))
    onnx.checker.check_model(simplified)
    assert len(simplified.graph.node) < len(plain.graph.node)
    assert {node.domain for node in simplified.graph.node} == {""}
    assert {entry.domain for entry in simplified.opset_import} <= {"", "ai.onnx"}
    assert {prop.key for prop in simplified.metadata_props} == {prop.key for prop in plain.metadata_props}
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(4))
    assert np.abs(onnx_outputs(path, images) - eager(weights, images)).max() < 1e-4


def test_half_export_takes_fp16_input(weights, tmp_path):
    path = run_export(weights, tmp_path, "--include", "onnx", "--half")["onnx"]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(float16)"
    images = torch.rand(1, 3, *IMGSZ, generator=torch.Generator().manual_seed(5))
    got = session.run(None, {"images": images.numpy().astype(np.float16)})[0].astype(np.float32)
    expected = eager(weights, images)
    np.testing.assert_allclose(got[..., :4], expected[..., :4], rtol=0, atol=0.5)  # pixels, fp16 steps <= 0.125
    np.testing.assert_allclose(got[..., 4:], expected[..., 4:], rtol=0, atol=5e-3)
