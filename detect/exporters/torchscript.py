"""What every export shares: its settings, the traced module and example input, the metadata; TorchScript itself."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import torch

from detect.atomic_file import replacing
from detect.errors import UserError
from detect.exporters.graph_nms import NmsSettings
from detect.models import DetectionModel, PredictModule

# ATC (CANN 8.0) reads ONNX opsets 11 to 15 (hiascend ATC reference, --framework): 13 suits it and onnxruntime alike.
DEFAULT_OPSET = 13
TORCHSCRIPT_METADATA = "detect.json"  # the extra file of a TorchScript export that holds its metadata


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """How to export: input shape (h, w) and batch, dynamic axes, fp16, BatchNorm folding, ONNX opset and simplify,
    and the NMS that ONNX-based formats get in their graph (None: NMS stays outside)."""

    imgsz: tuple[int, int] = (640, 640)
    batch_size: int = 1
    dynamic: bool = False  # batch, height and width dynamic (a static export takes exactly batch x 3 x h x w)
    dynamic_batch: bool = False  # the batch alone dynamic, height and width fixed (Triton's repository)
    half: bool = False
    fuse: bool = True
    opset: int = DEFAULT_OPSET
    simplify: bool = False
    nms: NmsSettings | None = None


def traced_module(model: DetectionModel, settings: ExportSettings,
                  device: torch.device) -> tuple[PredictModule, torch.Tensor]:
    """The module an export traces (predict: decode inside, NMS outside) on `device`, and its example input."""
    stride = model.max_stride
    if any(side % stride for side in settings.imgsz):
        raise UserError(f"--imgsz {settings.imgsz[0]} {settings.imgsz[1]}: both sides must be multiples of the "
                        f"model's stride {stride}")
    model = (model.fuse() if settings.fuse else model).eval()
    dtype = torch.float16 if settings.half else torch.float32
    module = PredictModule(model).to(device, dtype).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module, torch.zeros(settings.batch_size, 3, *settings.imgsz, device=device, dtype=dtype)


def export_metadata(model: DetectionModel, settings: ExportSettings) -> dict:
    """Names, stride and input shape, stored in every export (ONNX metadata_props, a TorchScript extra file); "nms"
    is added by the formats that carry it in their graph."""
    return {"producer": "detect", "names": list(model.names), "stride": model.max_stride,
            "imgsz": list(settings.imgsz), "batch": None if settings.dynamic_batch else settings.batch_size,
            "dynamic": settings.dynamic, "half": settings.half}


def export_torchscript(module: PredictModule, example: torch.Tensor, metadata: dict, path: Path) -> Path:
    """Trace `module` and save it with its metadata as the extra file detect.json; returns the path."""
    with torch.no_grad(), warnings.catch_warnings():
        # torch 2.14 marks torch.jit.trace deprecated; TorchScript is what this export promises, and tracing it is
        # the way to get one (the graph has no data-dependent control flow), so its FutureWarning is noise here.
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(module, example, strict=False)
        with replacing(path) as temporary:
            torch.jit.save(traced, str(temporary), _extra_files={TORCHSCRIPT_METADATA: json.dumps(metadata)})
    return path
