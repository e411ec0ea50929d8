"""The inference path that validation and predict share: a checkpoint or an exported ONNX as one predict callable."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from detect.backend import Backend
from detect.errors import UserError
from detect.inference.exported import GraphNms
from detect.inference.runtimes.om_model import OmInference
from detect.inference.runtimes.onnx_model import OnnxInference
from detect.inference.runtimes.openvino_model import OpenVinoInference, openvino_file
from detect.inference.runtimes.torchscript_model import TorchScriptInference
from detect.models import DetectionModel
from detect.models.weights import load_model
from detect.ops.nms import non_max_suppression

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


class TorchInference:
    """A DetectionModel made ready to infer on a backend: BatchNorm fused, SiLU in place, eval mode, fp16 when asked,
    channels_last where the backend is faster with it, and the backend's process-wide inference settings applied."""

    fixed_shape = None
    nms = None

    def __init__(self, model: DetectionModel, backend: Backend, half: bool = False, fuse: bool = True) -> None:
        backend.prepare_steps()
        self.dtype = torch.float16 if half else torch.float32
        self.memory_format = torch.channels_last if backend.channels_last else torch.contiguous_format
        model = (model.fuse() if fuse else model).eval()
        # Each SiLU takes a conv's (or BatchNorm's) fresh output that nothing else reads, so at inference it may
        # overwrite it: one activation-sized tensor less per layer, 2-4% of yolov5n's CPU time at batch 16 and 640x480
        # (process time, best of 4), outputs bit-identical.
        for module in model.modules():
            if isinstance(module, nn.SiLU):
                module.inplace = True
        self.model = model.to(backend.device, self.dtype).to(memory_format=self.memory_format)
        self.names = tuple(model.names)
        self.stride = model.max_stride

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) float in [0, 1] on the device -> (B, N, 5+nc) float32 decoded predictions."""
        images = images.to(self.dtype).contiguous(memory_format=self.memory_format)
        return self.model.predict(images).float()


@dataclasses.dataclass(frozen=True)
class Predictor:
    """A predict callable typed by what it returns: decoded rows that our NMS still sorts, or with `graph_nms` the
    rows that the NMS in an export's graph kept (the model already did NMS)."""

    predict: Callable[[torch.Tensor], torch.Tensor]  # (B, 3, H, W) float in [0, 1] on the device -> its outputs
    graph_nms: GraphNms | None = None  # the NMS in an export's graph; None: outputs are (B, N, 5+nc) decoded rows

    @classmethod
    def of(cls, predict: Predictor | Callable[[torch.Tensor], torch.Tensor]) -> Predictor:
        """`predict` as a Predictor: a plain callable (e.g. DetectionModel.predict) returns decoded rows."""
        return predict if isinstance(predict, Predictor) else cls(predict)

    @property
    def did_nms(self) -> bool:
        """Whether the model's outputs are detections already (NMS in its graph)."""
        return self.graph_nms is not None

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.predict(images)

    def detections(self, output: torch.Tensor, backend: Backend, *, conf_threshold: float, iou_threshold: float,
                   max_det: int, classes: Sequence[int] | None = None, agnostic: bool = False,
                   multi_label: bool = True) -> list[torch.Tensor]:
        """Per-image (n, 6) [x1, y1, x2, y2, score, class] detections in input pixels of this callable's `output`:
        our NMS on decoded rows, or the rows that the graph's NMS kept."""
        if self.graph_nms is not None:
            return self.graph_nms.detections(output, conf_threshold, iou_threshold, max_det, classes=classes,
                                             agnostic=agnostic)
        return non_max_suppression(output.float(), conf_threshold, iou_threshold, classes=classes, agnostic=agnostic,
                                   multi_label=multi_label, max_det=max_det, **backend.nms_arguments())


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


# Export suffixes and the runtime of each; an OpenVINO export is found by openvino_file (a .xml or its folder).
RUNTIMES = {".onnx": OnnxInference, ".om": OmInference, ".torchscript": TorchScriptInference}


def load_inference_model(weights: str | Path, backend: Backend, half: bool = False) -> InferenceModel:
    """Our checkpoint or a yolov5 .pt (run by PyTorch, fused), or an export: .onnx (onnxruntime), .om (ais_bench on
    an Ascend NPU), .torchscript (torch.jit), an OpenVINO .xml or its <stem>_openvino_model folder (OpenVINO)."""
    runtime, xml = RUNTIMES.get(Path(weights).suffix.lower()), openvino_file(weights)
    if runtime is None and xml is None:
        return TorchInference(load_model(weights), backend, half)
    if half:
        raise UserError(f"--half does not apply to {weights}: an export runs in the precision it was exported in")
    return OpenVinoInference(xml, backend) if xml is not None else runtime(weights, backend)
