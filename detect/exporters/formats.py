"""Every format of one export, written in order from one traced module: TorchScript, ONNX (with --int8 its int8
ONNX), the Ascend .om through atc, OpenVINO IR (with --int8 its int8 IR), a Triton model repository; what
`detect.export` and `detect.benchmarks` both write with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from detect.atomic_file import make_folder
from detect.exporters.amct import calibrate_amct
from detect.exporters.int8 import quantize_onnx
from detect.exporters.om import convert_om
from detect.exporters.onnx_export import export_onnx
from detect.exporters.openvino_export import export_openvino
from detect.exporters.openvino_int8 import quantize_openvino
from detect.exporters.torchscript import ExportSettings, export_metadata, export_torchscript, traced_module
from detect.exporters.triton import VERSION, TritonSettings, model_folder, write_triton_model


@dataclasses.dataclass(frozen=True)
class Int8Calibration:
    """--int8: the data yaml whose train images calibrate, and how many."""

    data: str
    images: int


def write_formats(model: nn.Module, include: tuple[str, ...], settings: ExportSettings, stem: Path,
                  device: torch.device, int8: Int8Calibration | None = None,
                  soc_version: str | None = None, triton: TritonSettings | None = None) -> dict[str, Path]:
    """Write each format of `include` (the exported ones of inference/model.py's FORMATS) as <stem>.<suffix>
    (triton: the model folder of model_repository/ beside them, with `triton`'s serving settings); returns format ->
    path (triton: the model file Triton loads), with `int8` each runtime's own int8 recipe too ("onnx-int8": ONNX
    Runtime's QDQ, "openvino-int8": NNCF), and om absent when atc is not installed."""
    metadata = export_metadata(model, settings)
    module, example = traced_module(model, settings, device)
    written: dict[str, Path] = {}
    if "torchscript" in include:
        written["torchscript"] = export_torchscript(module, example, metadata, stem.with_suffix(".torchscript"))
    if {"onnx", "om", "openvino"} & set(include):
        written["onnx"] = export_onnx(module, example, metadata, settings, stem.with_suffix(".onnx"))
        written.update(_int8_and_om(include, written["onnx"], settings, int8, soc_version))
    if "openvino" in include:
        written["openvino"] = export_openvino(written["onnx"], settings)
        if int8 is not None:
            written["openvino-int8"] = quantize_openvino(written["openvino"], int8.data, int8.images, settings)
    if "triton" in include:
        written["triton"] = _triton(module, example, model, settings, stem, triton or TritonSettings())
    return written


def _triton(module: nn.Module, example: torch.Tensor, model: nn.Module, settings: ExportSettings, stem: Path,
            triton: TritonSettings) -> Path:
    """The model folder of a Triton repository: the ONNX exported with a dynamic batch (height and width stay fixed
    unless --dynamic), then the backend's file and config.pbtxt."""
    batched = dataclasses.replace(settings, dynamic_batch=True)
    version = model_folder(stem) / VERSION
    make_folder(version)
    onnx_path = export_onnx(module, example, export_metadata(model, batched), batched, version / "model.onnx")
    return write_triton_model(onnx_path, batched, triton)


def _int8_and_om(include: tuple[str, ...], onnx_path: Path, settings: ExportSettings, int8: Int8Calibration | None,
                 soc_version: str | None) -> dict[str, Path]:
    """What is made from the ONNX: with `int8` its int8 ONNX; the .om (with `int8` of AMCT's calibrated deploy
    ONNX), absent when atc is not installed."""
    written = {}
    if int8 is not None and "onnx" in include:
        written["onnx-int8"] = quantize_onnx(onnx_path, int8.data, int8.images, settings)
    if "om" in include:
        source = calibrate_amct(onnx_path, int8.data, int8.images, settings) if int8 is not None else onnx_path
        om_path = convert_om(source, soc_version, settings)
        if om_path is not None:
            written["om"] = om_path
    return written
