"""The inference path that validation and predict share: the one table of model formats, and a checkpoint, an export
or a model in memory as one predict callable.

The table (FORMATS) gives each format's name, its file suffix or folder, the runtime class that runs it here, and
what `detect.export` does with it; export's --include, benchmarks' rows, the runtime of a path, the hub's weights and
serve's /v1/model read it, and each runtime class says its own format's name (`format`). The writers are
exporters/formats.py's `write_formats`: exporters sit on inference's floor (docs/architecture.md, "Floors"), so the
table says which formats export writes and that function writes each of them under its name.
"""

from __future__ import annotations

import copy
import dataclasses
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
from detect.models import DetectionModel
from detect.models.weights import load_model

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ModelFormat:
    """One format: how a path is recognised as it, what runs it here, and what export can make of it."""

    name: str  # as --include, benchmarks' rows and GET /v1/model name it
    suffix: str | None  # a file of this format ends so; None: not a file detect reads
    runtime: type | None  # the class that runs it here; None: it runs elsewhere (Triton Inference Server)
    exported: bool = True  # detect.export writes it
    folder: str | None = None  # an export's folder ending so is read as this format too (ultralytics' layout)
    yolov5: bool = True  # yolov5's export.py writes it too: yolov5's benchmarks list those first, in this order
    graph_nms: bool = False  # export --nms can put NMS in its graph (the formats made from an ONNX)
    int8: bool = False  # export --int8 writes an int8 one beside it


# A checkpoint (ours or yolov5's), and any path that no export's suffix or folder names.
PYTORCH = ModelFormat("pytorch", ".pt", TorchInference, exported=False)
# detect.export's order: --include's choices and the order it writes in.
FORMATS = (
    PYTORCH,
    ModelFormat("torchscript", ".torchscript", TorchScriptInference),
    ModelFormat("onnx", ".onnx", OnnxInference, graph_nms=True, int8=True),
    ModelFormat("om", ".om", OmInference, yolov5=False, graph_nms=True, int8=True),
    ModelFormat("openvino", ".xml", OpenVinoInference, folder=FOLDER_SUFFIX, graph_nms=True, int8=True),
    ModelFormat("triton", None, None, yolov5=False, graph_nms=True),  # model_repository/<name>/: its ONNX is read
)


def format_named(name: str) -> ModelFormat:
    """The format called `name` (a KeyError for another name: the CLIs take their choices from FORMATS)."""
    return {model_format.name: model_format for model_format in FORMATS}[name]


def format_of(weights: str | Path) -> ModelFormat:
    """The format of a path: an export by its suffix or its folder's ending, else PyTorch weights."""
    path = Path(weights)
    for model_format in FORMATS:
        if model_format.runtime is None:
            continue
        if path.suffix.lower() == model_format.suffix:
            return model_format
        if model_format.folder is not None and path.name.endswith(model_format.folder) and path.is_dir():
            return model_format
    return PYTORCH


def exported_names() -> tuple[str, ...]:
    """The formats detect.export writes, in its order (--include's choices)."""
    return tuple(model_format.name for model_format in FORMATS if model_format.exported)


def benchmarked_names() -> tuple[str, ...]:
    """PyTorch and each export that runs here: yolov5's formats in its order (PyTorch, TorchScript, ONNX, OpenVINO,
    its benchmarks.py's rows), then ours."""
    runnable = [model_format for model_format in FORMATS if model_format.runtime is not None]
    return tuple(model_format.name for model_format in sorted(runnable, key=lambda each: not each.yolov5))


class InferenceModel(Protocol):
    """What validation and predict need from a model, whatever runs it (PyTorch, onnxruntime, ais_bench, OpenVINO)."""

    format: str  # its format's name in FORMATS
    names: tuple[str, ...]
    stride: int  # input sides must be multiples of it
    fixed_shape: tuple[int, int] | None  # (h, w) every input must have (a static export); None: any multiple of stride
    batch: int | None  # the batch size every call is cut and padded to (a static export); None: any
    nms: GraphNms | None  # the NMS an export has in its graph; None: its outputs need ours
    imgsz: tuple[int, int] | None  # the (h, w) its file records: a checkpoint's training size, an export's; None: none

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] on the backend's device -> (B, N, 5+nc) float32 decoded (DetectionModel.predict),
        or with `nms` the graph's (B, max_det, 6) detections."""
        ...


Weights = str | Path | Sequence[str | Path] | DetectionModel | InferenceModel
DEFAULT_IMGSZ = 640  # yolov5's inference size: for a model whose file records none
IMGSZ_DEFAULT_HELP = f"default: the size the model was trained at (an export: exported at), else {DEFAULT_IMGSZ}"


def check_imgsz_flag(imgsz: Sequence[int] | None) -> None:
    """--imgsz of the inference commands: one side or height width (the flag's bound, IMAGE_SIZE, checks each side)."""
    if imgsz is not None and len(imgsz) > 2:
        raise UserError(f"--imgsz {' '.join(map(str, imgsz))}: one side or height width")


@dataclasses.dataclass(frozen=True)
class InputSize:
    """The (h, w) a model runs at, and why (the end of "at 320x320 px, ...")."""

    size: tuple[int, int]
    reason: str

    @property
    def side(self) -> int:
        """The long side (what a square letterbox takes)."""
        return max(self.size)

    def __str__(self) -> str:
        height, width = self.size
        return f"{height} px, {self.reason}" if height == width else f"{height}x{width} px, {self.reason}"


def input_size(model: InferenceModel | DetectionModel, asked: Sequence[int] | None) -> InputSize:
    """--imgsz when given (one side or height width), else the size the model's file records (the size a checkpoint
    was trained at, an export's own), else 640."""
    if asked:
        return InputSize((asked[0], asked[-1]), "as given")
    if isinstance(model, DetectionModel):
        side, done = model.trained.imgsz, "trained"
        recorded = None if side is None else (side, side)
    else:
        recorded, done = model.imgsz, "trained" if model.format == PYTORCH.name else "exported"
    if recorded is not None:
        return InputSize(tuple(recorded), f"the size the model was {done} at")
    return InputSize((DEFAULT_IMGSZ, DEFAULT_IMGSZ), "the default: the model's file records no size")


def load_inference_model(weights: Weights, backend: Backend, half: bool = False) -> InferenceModel:
    """Our checkpoint or a yolov5 .pt (run by PyTorch, fused), or an export: .onnx (onnxruntime), .om (ais_bench on
    an Ascend NPU), .torchscript (torch.jit), an OpenVINO .xml or its <stem>_openvino_model folder (OpenVINO): the
    runtime of its format (FORMATS). Several paths: yolov5's ensemble of .pt files with the same classes
    (ours or yolov5's, any mix; an export among them is refused), run as one model (runtimes/ensemble_model.py).
    A DetectionModel in memory runs as a checkpoint would (a copy is fused: the caller's model is left as it is);
    a model already loaded (this function's, on `backend`'s device) is returned as it is."""
    if isinstance(weights, DetectionModel):
        models, paths = [copy.deepcopy(weights).float()], ["a model in memory"]  # fused in fp32, as a file loads
    elif isinstance(weights, (str, Path, Sequence)):
        paths = [str(weights)] if isinstance(weights, (str, Path)) else [str(path) for path in weights]
        formats = [format_of(path) for path in paths]
        if len(paths) > 1 and any(model_format is not PYTORCH for model_format in formats):
            export = next(path for path, model_format in zip(paths, formats) if model_format is not PYTORCH)
            raise UserError(f"an ensemble runs PyTorch weights (.pt) only, not the export {export}: ensemble the .pt "
                            f"files the exports were made from")
        if half and formats[0] is not PYTORCH:
            raise UserError(f"--half does not apply to {paths[0]}: an export runs in the precision it was exported "
                            f"in")
        models = [load_model(path) if model_format is PYTORCH else model_format.runtime(path, backend)
                  for path, model_format in zip(paths, formats)]
    elif half:
        raise UserError("--half does not apply to a model already loaded: it runs in the precision it was loaded in")
    else:
        return weights
    models = [TorchInference(model, backend, half) if isinstance(model, DetectionModel) else model for model in models]
    return models[0] if len(models) == 1 else EnsembleInference(models, paths)
