"""The inference path that validation and predict share: a checkpoint or an exported ONNX as one predict callable."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch

from detect.backend import Backend
from detect.backend.openvino_runtime import FOLDER_SUFFIX
from detect.errors import UserError
from detect.inference.exported import GraphNms
from detect.inference.runtimes.ensemble_model import EnsembleInference
from detect.inference.runtimes.om_model import OmInference
from detect.inference.runtimes.onnx_model import OnnxInference
from detect.inference.runtimes.openvino_model import OpenVinoInference
from detect.inference.runtimes.torch_model import TorchInference
from detect.inference.runtimes.torchscript_model import TorchScriptInference
from detect.models.weights import load_model

LOGGER = logging.getLogger(__name__)


class InferenceModel(Protocol):
    """What validation and predict need from a model, whatever runs it (PyTorch, onnxruntime, ais_bench, OpenVINO)."""

    names: tuple[str, ...]
    stride: int  # input sides must be multiples of it
    fixed_shape: tuple[int, int] | None  # (h, w) every input must have (a static export); None: any multiple of stride
    nms: GraphNms | None  # the NMS an export has in its graph; None: its outputs need ours

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] on the backend's device -> (B, N, 5+nc) float32 decoded (DetectionModel.predict),
        or with `nms` the graph's (B, max_det, 6) detections."""
        ...


# Export suffixes and the runtime of each; an OpenVINO export is its .xml or the <stem>_openvino_model folder.
RUNTIMES = {".onnx": OnnxInference, ".om": OmInference, ".torchscript": TorchScriptInference, ".xml": OpenVinoInference}


def export_runtime(weights: str | Path) -> type | None:
    """The runtime of an export (by suffix, or an OpenVINO <stem>_openvino_model folder); None: PyTorch weights."""
    path = Path(weights)
    runtime = RUNTIMES.get(path.suffix.lower())
    if runtime is None and path.name.endswith(FOLDER_SUFFIX) and path.is_dir():
        runtime = OpenVinoInference
    return runtime


def load_inference_model(weights: str | Path | Sequence[str | Path], backend: Backend,
                         half: bool = False) -> InferenceModel:
    """Our checkpoint or a yolov5 .pt (run by PyTorch, fused), or an export: .onnx (onnxruntime), .om (ais_bench on
    an Ascend NPU), .torchscript (torch.jit), an OpenVINO .xml or its <stem>_openvino_model folder (OpenVINO).
    Several paths: yolov5's ensemble of .pt files with the same classes (ours or yolov5's, any mix; an export among
    them is refused), run as one model (runtimes/ensemble_model.py)."""
    paths = [str(weights)] if isinstance(weights, (str, Path)) else [str(path) for path in weights]
    runtimes = [export_runtime(path) for path in paths]
    if len(paths) > 1 and any(runtimes):
        export = next(path for path, runtime in zip(paths, runtimes) if runtime is not None)
        raise UserError(f"an ensemble runs PyTorch weights (.pt) only, not the export {export}: ensemble the .pt "
                        f"files the exports were made from")
    if half and runtimes[0] is not None:
        raise UserError(f"--half does not apply to {paths[0]}: an export runs in the precision it was exported in")
    models = [TorchInference(load_model(path), backend, half) if runtime is None else runtime(path, backend)
              for path, runtime in zip(paths, runtimes)]
    return models[0] if len(models) == 1 else EnsembleInference(models, paths)
