"""`--include triton`: the model repository's config.pbtxt parses as Triton's ModelConfig (tritonclient's protobuf),
names the graph's inputs and outputs with their types and dimensions, and the model takes any batch up to the
config's and computes what the eager model computes."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
import torch

from detect.backend.openvino_runtime import shared_core
from tests.exporters.helpers import IMGSZ, eager, onnx_session, run_export

try:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2
except (ImportError, RuntimeError) as error:  # tritonclient.grpc raises RuntimeError when grpcio is missing
    pytest.skip(f'tritonclient[grpc] is optional (pip install "detect-trainer[triton]"): {error}',
                allow_module_level=True)

pytestmark = pytest.mark.slow  # each exports a model (3-5 s)

ONNX_TYPES = {onnx.TensorProto.FLOAT: model_config_pb2.TYPE_FP32, onnx.TensorProto.INT64: model_config_pb2.TYPE_INT64}


def parsed_config(folder) -> model_config_pb2.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def assert_tensors_match(configured, graph_values) -> None:
    """Each configured tensor is the graph's, in order: name, type, dimensions past the graph's symbolic batch."""
    assert [tensor.name for tensor in configured] == [value.name for value in graph_values]
    for tensor, value in zip(configured, graph_values, strict=True):
        batch, *dims = value.type.tensor_type.shape.dim
        assert batch.dim_param and not batch.dim_value  # the batch Triton's batcher fills
        assert tensor.data_type == ONNX_TYPES[value.type.tensor_type.elem_type]
        shape = [dim.dim_value for dim in dims]
        assert list(tensor.dims) == (shape or [1]) and all(shape)
        assert tensor.HasField("reshape") == (not shape) and not tensor.reshape.shape


def test_the_onnx_repository_config_parses_and_matches_the_graph(weights, tmp_path):
    written = run_export(weights, tmp_path, "--include", "triton", "--triton-max-batch", "4",
                         "--triton-max-queue-delay-us", "2000", "--triton-instances", "2")
    model_file = tmp_path / "model_repository" / "tiny" / "1" / "model.onnx"
    assert written == {"triton": model_file} and sorted(path.name for path in model_file.parents[1].iterdir()) == [
        "1", "config.pbtxt"]
    config = parsed_config(model_file.parents[1])
    assert (config.name, config.backend, config.max_batch_size) == ("tiny", "onnxruntime", 4)
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    auto = model_config_pb2.ModelInstanceGroup.KIND_AUTO
    assert [(group.count, group.kind) for group in config.instance_group] == [(2, auto)]
    graph = onnx.load(str(model_file)).graph
    assert_tensors_match(config.input, graph.input)
    assert_tensors_match(config.output, graph.output)
    assert list(config.input[0].dims) == [3, *IMGSZ] and list(config.output[0].dims) == [756, 8]
    images = torch.rand(3, 3, *IMGSZ, generator=torch.Generator().manual_seed(4))
    got = onnx_session(model_file).run(None, {"images": images.numpy()})[0]
    assert got.shape == (3, 756, 8) and np.abs(got - eager(weights, images)).max() < 1e-4


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                    reason='OpenVINO is optional (pip install "detect-trainer[openvino]")')
def test_the_openvino_backend_gets_the_ir_and_nms_outputs_with_a_batch_only_count(weights, tmp_path):
    written = run_export(weights, tmp_path, "--include", "triton", "--triton-backend", "openvino", "--nms")
    folder = tmp_path / "model_repository" / "tiny"
    assert written == {"triton": folder / "1" / "model.xml"}
    assert sorted(path.name for path in (folder / "1").iterdir()) == ["model.bin", "model.xml"]
    config = parsed_config(folder)
    assert (config.backend, config.max_batch_size) == ("openvino", 8)
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert [group.kind for group in config.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_CPU]
    assert [(tensor.name, list(tensor.dims)) for tensor in config.output] == [("detections", [300, 6]), ("count", [1])]
    assert config.output[1].data_type == model_config_pb2.TYPE_INT64 and config.output[1].HasField("reshape")
    ir = shared_core("the test").read_model(str(folder / "1" / "model.xml"))
    assert [port.get_any_name() for port in ir.inputs] == ["images"]
    assert [port.get_any_name() for port in ir.outputs] == ["detections", "count"]
    assert str(ir.input(0).get_partial_shape()) == f"[?,3,{IMGSZ[0]},{IMGSZ[1]}]"
