"""What the tools run: a model from --cfg or --weights, a seeded synthetic batch with boxes, yolov5's loss, and the
backend of a device + precision choice."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from detect import backend as backends
from detect.backend import NPU_ALLOW_HF32_HELP, NPU_JIT_COMPILE_HELP
from detect.config import IMAGE_SIZE, NON_NEGATIVE, POSITIVE, Settings, load_hyp, option
from detect.data.batch import Batch, Sample, collate
from detect.models import DetectionModel, build_model
from detect.models.weights import load_model
from detect.training.loss import DetectionLoss, LossSettings

PRECISIONS = ("fp32", "amp", "fp16", "bf16")  # amp: the device's AMP dtype (fp16 on accelerators, bf16 on cpu)
GREY = 114  # yolov5's letterbox fill


@dataclasses.dataclass(frozen=True)
class WorkloadSettings(Settings):
    """The options the tools share: the model, the synthetic batch, the NPU switches (a tool's settings extend it)."""

    cfg: str = option("yolov5n.yaml", "model yaml (ignored when --weights is given)")
    weights: str | None = option(None, "a checkpoint (ours or an ultralytics/yolov5 .pt)")
    nc: int = option(80, "classes of a --cfg model", bound=POSITIVE)
    imgsz: int = option(640, "image size, pixels", bound=IMAGE_SIZE)
    batch_size: int = option(16, bound=POSITIVE)
    seed: int = option(0, "initial weights and the batch", bound=NON_NEGATIVE)
    npu_jit_compile: bool | None = option(None, NPU_JIT_COMPILE_HELP)
    npu_allow_hf32: bool | None = option(None, NPU_ALLOW_HF32_HELP)


def select_backend(device: str, precision: str, args: WorkloadSettings) -> backends.Backend:
    """The backend for `device` computing in `precision` (one of PRECISIONS), with the NPU switches of `args`."""
    named = precision if precision in ("fp16", "bf16") else None
    backend = backends.select(device, amp=precision != "fp32", amp_dtype=named,
                              npu_jit_compile=args.npu_jit_compile, npu_allow_hf32=args.npu_allow_hf32)
    backend.set_device()
    return backend


def precision_name(backend: backends.Backend) -> str:
    """fp32, or the autocast dtype's short name (fp16, bf16)."""
    return "fp32" if backend.amp_dtype is None else {torch.float16: "fp16", torch.bfloat16: "bf16"}[backend.amp_dtype]


def build_tool_model(cfg: str, weights: str | None, num_classes: int, seed: int) -> DetectionModel:
    """The model of --weights, else --cfg with seeded initial weights; fp32 on the CPU, train mode."""
    torch.manual_seed(seed)
    model = load_model(weights) if weights else build_model(cfg, num_classes=num_classes)
    return model.float().train()


def build_criterion(model: DetectionModel, imgsz: int) -> DetectionLoss:
    """yolov5's loss for this model with the default hyp (scratch-low), reading the model's live anchors."""
    settings = LossSettings.from_hyp(load_hyp(), model.detect.nl, model.nc, imgsz)
    return DetectionLoss(settings, model.detect.anchors, model.nc)


def synthetic_batch(batch_size: int, imgsz: int, num_classes: int, seed: int) -> Batch:
    """A seeded batch of square images with 2-8 filled, lightly textured boxes each, and their labels."""
    rng = np.random.default_rng(seed)
    samples = []
    for index in range(batch_size):
        image = np.full((3, imgsz, imgsz), GREY, np.uint8)
        labels = []
        for _ in range(int(rng.integers(2, 9))):
            width, height = rng.uniform(0.05, 0.5, size=2)
            cx, cy = rng.uniform(width / 2, 1 - width / 2), rng.uniform(height / 2, 1 - height / 2)
            x0, x1 = int((cx - width / 2) * imgsz), int((cx + width / 2) * imgsz)
            y0, y1 = int((cy - height / 2) * imgsz), int((cy + height / 2) * imgsz)
            texture = rng.integers(0, 24, size=(3, y1 - y0, x1 - x0))  # flat boxes would leave convs little to do
            image[:, y0:y1, x0:x1] = np.clip(rng.integers(0, 232, size=(3, 1, 1)) + texture, 0, 255)
            labels.append([rng.integers(num_classes), cx, cy, width, height])
        samples.append(Sample(image=image, labels=np.asarray(labels, np.float32), path=f"synthetic/{index}",
                              image_id=index))
    return collate(samples)
