"""A Triton Inference Server model repository: <repository>/<name>/config.pbtxt and <name>/1/model.onnx (the ONNX
backend) or 1/model.xml + .bin (the OpenVINO backend), the model's batch dimension dynamic so that Triton's dynamic
batcher can gather requests into batches of up to max_batch_size.

The config is written as protobuf text by hand (no dependency at export time); its inputs and outputs are read back
from the written ONNX, so they match the graph whatever the options (--half, --dynamic, --nms).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from detect.atomic_file import remove_file, write_text
from detect.errors import UserError
from detect.exporters.onnx_export import import_onnx
from detect.exporters.openvino_export import export_openvino
from detect.exporters.torchscript import ExportSettings

REPOSITORY = "model_repository"  # the folder `tritonserver --model-repository` is given
VERSION = "1"  # Triton serves the highest numbered version folder by default
BACKENDS = ("onnxruntime", "openvino")
MODEL_FILES = {"onnxruntime": "model.onnx", "openvino": "model.xml"}  # each backend's default_model_filename
# ONNX TensorProto element types -> Triton's DataType names (model_config.proto).
TRITON_TYPES = {1: "TYPE_FP32", 10: "TYPE_FP16", 6: "TYPE_INT32", 7: "TYPE_INT64", 2: "TYPE_UINT8", 9: "TYPE_BOOL"}


@dataclasses.dataclass(frozen=True)
class TritonSettings:
    """How Triton is to serve the model: which backend, the largest batch its dynamic batcher forms, how long a
    request may wait for others (microseconds), and how many model instances run side by side."""

    backend: str = "onnxruntime"
    max_batch_size: int = 8
    max_queue_delay_us: int = 5000  # the same 5 ms as detect.serve's --max-wait-ms
    instances: int = 1

    def preferred_batch_sizes(self) -> list[int]:
        """The batch sizes the batcher aims for: the largest and its half (a full batch does not wait)."""
        return sorted({max(1, self.max_batch_size // 2), self.max_batch_size})


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of the graph as Triton sees it: the dimensions after the batch (-1: dynamic)."""

    name: str
    data_type: str
    dims: tuple[int, ...]


def model_folder(stem: Path) -> Path:
    """Where the model of export stem `stem` goes: <stem's folder>/model_repository/<stem's name>/."""
    return stem.parent / REPOSITORY / stem.name


def graph_tensors(onnx_path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The ONNX's inputs and outputs with their Triton types and dimensions past the (dynamic) batch."""
    graph = import_onnx().load(str(onnx_path), load_external_data=False).graph
    initializers = {initializer.name for initializer in graph.initializer}

    def spec(value) -> TensorSpec:
        tensor_type = value.type.tensor_type
        if tensor_type.elem_type not in TRITON_TYPES:
            raise UserError(f"{onnx_path}: {value.name} has ONNX element type {tensor_type.elem_type}, which the "
                            "Triton config does not map")
        batch, *rest = tensor_type.shape.dim
        if batch.dim_value:
            raise UserError(f"{onnx_path}: {value.name} has a fixed batch {batch.dim_value}; Triton's batcher needs "
                            "it dynamic")
        return TensorSpec(value.name, TRITON_TYPES[tensor_type.elem_type],
                          tuple(dim.dim_value if dim.dim_value else -1 for dim in rest))

    inputs = [spec(value) for value in graph.input if value.name not in initializers]
    return inputs, [spec(value) for value in graph.output]


def config_text(name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], triton: TritonSettings) -> str:
    """config.pbtxt: protobuf text of Triton's ModelConfig."""
    kind = "KIND_CPU" if triton.backend == "openvino" else "KIND_AUTO"  # OpenVINO's backend runs on the CPU only
    lines = [f'name: "{name}"', f'backend: "{triton.backend}"', f"max_batch_size: {triton.max_batch_size}",
             *_tensors("input", inputs), *_tensors("output", outputs),
             "dynamic_batching {",
             f"  preferred_batch_size: [ {', '.join(map(str, triton.preferred_batch_sizes()))} ]",
             f"  max_queue_delay_microseconds: {triton.max_queue_delay_us}", "}",
             "instance_group [", "  {", f"    count: {triton.instances}", f"    kind: {kind}", "  }", "]"]
    return "\n".join(lines) + "\n"


def _tensors(field: str, specs: list[TensorSpec]) -> list[str]:
    lines = [f"{field} ["]
    for index, spec in enumerate(specs):
        # A tensor that is only the batch (the NMS count, (B,)) is given Triton as [1], reshaped to [] for the model.
        dims = spec.dims or (1,)
        lines += ["  {", f'    name: "{spec.name}"', f"    data_type: {spec.data_type}",
                  f"    dims: [ {', '.join(map(str, dims))} ]"]
        if not spec.dims:
            lines.append("    reshape: { shape: [ ] }")
        lines.append("  }," if index < len(specs) - 1 else "  }")
    return [*lines, "]"]


def write_triton_model(onnx_path: Path, settings: ExportSettings, triton: TritonSettings) -> Path:
    """Complete the model folder whose ONNX (exported with a dynamic batch) is `onnx_path` (<folder>/1/model.onnx):
    convert it to OpenVINO IR for that backend, and write config.pbtxt; returns the model file Triton loads."""
    if triton.backend not in BACKENDS:
        raise UserError(f"--triton-backend {triton.backend}: one of {', '.join(BACKENDS)}")
    folder = onnx_path.parent.parent
    inputs, outputs = graph_tensors(onnx_path)
    model_file = onnx_path
    if triton.backend == "openvino":
        model_file = export_openvino(onnx_path, settings, onnx_path.with_name(MODEL_FILES["openvino"]))
        remove_file(onnx_path)  # the OpenVINO backend loads model.xml; the ONNX would only be a stale copy
    write_text(folder / "config.pbtxt", config_text(folder.name, inputs, outputs, triton))
    return model_file
