"""What the exporter tests share: a tiny 3-class yolov5n checkpoint, the export CLI at a small image size, and the
eager and ONNX Runtime outputs every export is compared with."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from detect import export
from detect.errors import UserError
from detect.models import build_model
from detect.models.safe_io import save_checkpoint
from detect.models.weights import load_model, weights_payload

NAMES = ["cat", "dog", "bird"]
IMGSZ = (96, 128)  # (h, w), small so tracing and exporting stay fast


def tiny_weights(folder: Path) -> Path:
    """An untrained 3-class yolov5n checkpoint with non-trivial BatchNorm statistics (so fusing is exercised)."""
    torch.manual_seed(0)
    model = build_model("yolov5n.yaml", num_classes=len(NAMES), names=NAMES)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.2, 0.2)
            module.running_var.uniform_(0.5, 2.0)
    return save_checkpoint(folder / "tiny.pt", weights_payload(model))


def run_export(weights: Path, out: Path, *options: str) -> dict[str, Path]:
    args = export.parse_args(["--weights", str(weights), "--imgsz", *map(str, IMGSZ), "--output-dir", str(out),
                              *options])
    return export.export(args)


def eager(weights: Path, images: torch.Tensor) -> np.ndarray:
    """The unfused eager model's decoded predictions: what every export must reproduce."""
    with torch.no_grad():
        return load_model(weights).predict(images).numpy()


def onnx_session(path: Path) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def onnx_outputs(path: Path, images: torch.Tensor) -> np.ndarray:
    return onnx_session(path).run(None, {"images": images.numpy().astype(np.float32)})[0]


def static_exports_of(weights: Path, folder: Path) -> dict[str, Path]:
    """TorchScript and a static opset-12 ONNX of `weights`, written with onnxscript blocked: the export must not need
    the dynamo exporter's package (onnxscript); the legacy exporter is chosen on purpose (dynamo=False) and writes
    the requested opset natively."""
    blocked = pytest.MonkeyPatch()
    blocked.setitem(sys.modules, "onnxscript", None)
    try:
        return run_export(weights, folder, "--include", "torchscript", "onnx", "--opset", "12")
    finally:
        blocked.undo()


def assert_static_batches_cut_and_padded(inference, model) -> None:
    """A static 2 x 3 x 64 x 96 export (`inference`) of `model`: three images run as a full batch and a padded one and
    equal the model's outputs; another image shape is one line."""
    assert inference.fixed_shape == (64, 96) and inference.batch == 2
    images = torch.rand(3, 3, 64, 96, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model.predict(images)
    got = inference(images)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert (got - expected).abs().max() < 1e-4
    with pytest.raises(UserError, match="takes 64x96 images only, got 64x64"):
        inference(torch.rand(2, 3, 64, 64))
