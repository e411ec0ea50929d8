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


def square_input_size(model: InferenceModel, imgsz: int) -> int:
    """The square side validation letterboxes to: imgsz rounded up to the model's stride (as yolov5's val.py, with a
    warning: a P7 model's is 128), or a static export's own side (it takes nothing else)."""
    if model.fixed_shape is None:
        side = -(-imgsz // model.stride) * model.stride
        if side != imgsz:
            LOGGER.warning("--imgsz %d is not a multiple of the model's stride %d: evaluating at %d", imgsz,
                           model.stride, side)
        return side
    height, width = model.fixed_shape
    if height != width:
        raise UserError(f"this export takes {height}x{width} inputs; validation letterboxes to squares: "
                        f"export it square or with --dynamic")
    if height != imgsz:
        LOGGER.info("the export is static at %dx%d: evaluating at that size, not --imgsz %d", height, width, imgsz)
    return height


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
    Several paths: PyTorch weights with the same classes, run as one ensemble (runtimes/ensemble_model.py)."""
    if not isinstance(weights, (str, Path)):
        if len(weights) > 1:
            return load_ensemble(weights, backend, half)
        (weights,) = weights
    runtime = export_runtime(weights)
    if runtime is None:
        return TorchInference(load_model(weights), backend, half)
    if half:
        raise UserError(f"--half does not apply to {weights}: an export runs in the precision it was exported in")
    return runtime(weights, backend)


def load_ensemble(weights: Sequence[str | Path], backend: Backend, half: bool = False) -> EnsembleInference:
    """yolov5's ensemble of several .pt files (ours or yolov5's, any mix); an export among them is refused."""
    for path in weights:
        if export_runtime(path) is not None:
            raise UserError(f"an ensemble runs PyTorch weights (.pt) only, not the export {path}: ensemble the .pt "
                            f"files the exports were made from")
    members = [TorchInference(load_model(path), backend, half) for path in weights]
    return EnsembleInference(members, [str(path) for path in weights])
