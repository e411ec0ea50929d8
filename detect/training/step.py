"""The training step, written once: the parts it uses (`TrainingParts`, built from a `StepRecipe`), then for each batch
the copy to the device, forward and loss under autocast, the ranks' agreement (skip, stop, save), the scaled backward,
and every `accumulate` batches the optimizer step in yolov5's order (`OPTIMIZER_STEP`). The epoch loop, the throughput
tool and `doctor --ops` all call these functions; `phase(name)` around each part is how the doctor records its ops."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from detect.backend import Backend
from detect.config import Hyp
from detect.data import Batch
from detect.data.device_batch import DeviceBatch, to_device_batch
from detect.models import DetectionModel
from detect.training.control import Control
from detect.training.distributed import DistContext, any_rank, entering
from detect.training.loss import DetectionLoss, LossSettings
from detect.training.optim import ModelEMA, OptimSettings, build_optimizer

MAX_GRAD_NORM = 10.0  # gradient clipping after unscale (docs/yolov5.md, "Step order and gradient clip")
Criterion = Callable[[list[torch.Tensor], torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
StepPhase = Callable[[str], contextlib.AbstractContextManager]


def unrecorded(name: str) -> contextlib.AbstractContextManager:
    """A step phase that nothing records (the loop's and the throughput tool's steps)."""
    return contextlib.nullcontext()


@dataclasses.dataclass(frozen=True)
class StepRecipe:
    """What a step's parts follow besides the model and the device: yolov5's hyp (the loss's gains, the scaler's
    settings), the optimizer's settings, the global batch and the image size (the loss's scales) and label
    smoothing."""

    hyp: Hyp
    optim: OptimSettings
    batch_size: int
    imgsz: int
    label_smoothing: float = 0.0


@dataclasses.dataclass(frozen=True)
class TrainingParts:
    """What a training step uses besides the batch, the device and the job included; `ema` exists on the main rank
    only."""

    train_model: nn.Module  # what the step calls: DistributedDataParallel around the model under torchrun, else it
    criterion: Criterion
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ema: ModelEMA | None
    backend: Backend
    context: DistContext = dataclasses.field(default_factory=DistContext)  # in_job: the job of a torchrun rank


def build_parts(model: DetectionModel, backend: Backend, recipe: StepRecipe,
                ema: ModelEMA | None = None) -> TrainingParts:
    """yolov5's optimizer groups, the GradScaler and the loss for `model` (already on the backend's device), in one
    process (in_job: under torchrun). The backend's process-wide settings for repeated steps are applied
    (Backend.prepare_steps)."""
    backend.prepare_steps()
    hyp = recipe.hyp
    optimizer = build_optimizer(model, recipe.optim, recipe.batch_size)
    scaler = backend.grad_scaler(init_scale=hyp.amp_init_scale, growth_factor=hyp.amp_growth_factor,
                                 growth_interval=hyp.amp_growth_interval)
    loss_settings = LossSettings.from_hyp(hyp, model.detect.nl, model.nc, recipe.imgsz, recipe.label_smoothing)
    criterion = DetectionLoss(loss_settings, model.detect.anchors, model.nc, matched_only=backend.dynamic_shapes)
    return TrainingParts(model, criterion, optimizer, scaler, ema, backend)


def in_job(parts: TrainingParts, context: DistContext, sync_bn: bool = False) -> TrainingParts:
    """The parts of a rank of `context`'s job: under torchrun the model in DDP (with SyncBatchNorm when asked); in
    one process `parts` as they are."""
    if not context.distributed:
        return parts
    model = nn.SyncBatchNorm.convert_sync_batchnorm(parts.train_model) if sync_bn else parts.train_model
    # DDP broadcasts rank 0's parameters and buffers (the AutoAnchor result included) to every rank.
    device_ids = None if parts.backend.device.type == "cpu" else [parts.backend.device.index]
    return dataclasses.replace(parts, train_model=DistributedDataParallel(model, device_ids=device_ids),
                               context=context)


def to_device(parts: TrainingParts, batch: Batch, size: int | None = None,
              phase: StepPhase = unrecorded) -> DeviceBatch:
    """The host's uint8 batch as float images on the device, resized to `size` (--multi-scale)."""
    with phase("copy to the device, resize (--multi-scale)"):
        return to_device_batch(batch, parts.backend, size)


def forward_loss(parts: TrainingParts, batch: DeviceBatch,
                 phase: StepPhase = unrecorded) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of the model's raw outputs and its items (box, obj, cls), under the backend's autocast (the loss
    itself is computed in fp32: training/loss.py)."""
    with parts.backend.autocast():
        with phase("forward (train mode, autocast)"):
            outputs = parts.train_model(batch.images)
        with phase("loss with target assignment"):
            return parts.criterion(outputs, batch.padded_targets)


def ranks_agree(parts: TrainingParts, loss: torch.Tensor, control: Control,
                phase: StepPhase = unrecorded) -> tuple[bool, bool, bool]:
    """(the loss is not finite on some rank, some rank asks to stop, some rank asks to save): the ranks must agree
    to skip (or DDP's backward would wait forever), to stop and to save, so one all-reduce carries the three; the
    step's one host sync."""
    with phase("the step's all-reduce of its flags"):
        asks = torch.tensor([False, control.stop_signal is not None, control.save_asked], device=loss.device)
        asks[0] = ~torch.isfinite(loss.detach())
        nonfinite, stop, save = any_rank(parts.context, asks).tolist()
    return nonfinite, stop, save


def backward(parts: TrainingParts, loss: torch.Tensor, phase: StepPhase = unrecorded) -> None:
    """The scaled backward pass; yolov5 multiplies the loss by the world size because DDP averages the gradients
    (docs/yolov5.md, "Loss")."""
    with phase("backward (scaled loss)"):
        parts.scaler.scale(loss * parts.context.world_size).backward()


def forward_backward(parts: TrainingParts, batch: DeviceBatch, sync: bool,
                     control: Control) -> tuple[torch.Tensor | None, bool, bool]:
    """One batch: (its loss items (3,) after the backward pass, or None when the loss was not finite on some rank
    (no backward), whether any rank asks to stop, whether any rank asks to save). Gradients are all-reduced only on
    the batch that ends an accumulation (`sync`; DDP's no_sync before it)."""
    context = parts.context
    with parts.train_model.no_sync() if context.distributed and not sync else contextlib.nullcontext():
        if context.distributed:
            entering("DDP's forward (its broadcast of rank 0's BatchNorm buffers)")
        loss, items = forward_loss(parts, batch)
        nonfinite, stop, save = ranks_agree(parts, loss, control)
        if nonfinite:
            return None, stop, save
        if sync and context.distributed:
            entering("the gradient all-reduce of DDP's backward")
        backward(parts, loss)
    return items, stop, save


def unscale_gradients(parts: TrainingParts) -> None:
    parts.scaler.unscale_(parts.optimizer)


def clip_gradients(parts: TrainingParts) -> torch.Tensor:
    """The gradients' total norm before clipping (a device tensor)."""
    return nn.utils.clip_grad_norm_(parts.train_model.parameters(), max_norm=MAX_GRAD_NORM)


def step_optimizer(parts: TrainingParts) -> None:
    parts.scaler.step(parts.optimizer)  # skipped when the gradients are not finite


def update_scale(parts: TrainingParts) -> None:
    parts.scaler.update()


def zero_gradients(parts: TrainingParts) -> None:
    parts.optimizer.zero_grad(set_to_none=True)


def update_ema(parts: TrainingParts) -> None:
    if parts.ema is not None:  # the main rank's
        parts.ema.update(parts.train_model)


# The optimizer step in yolov5's order (docs/yolov5.md, "Step order and gradient clip"): each phase's name ({optimizer}:
# its class, SGD, Adam or AdamW) and what it does. The loop and the throughput tool run it, doctor --ops records it.
OPTIMIZER_STEP: tuple[tuple[str, Callable[[TrainingParts], torch.Tensor | None]], ...] = (
    ("GradScaler unscale_", unscale_gradients),
    ("gradient clipping (clip_grad_norm_)", clip_gradients),
    ("{optimizer} step (GradScaler step)", step_optimizer),
    ("GradScaler update", update_scale),
    ("zero the gradients", zero_gradients),
    ("EMA update", update_ema),
)


def optimizer_step(parts: TrainingParts, phase: StepPhase = unrecorded) -> torch.Tensor:
    """OPTIMIZER_STEP's phases in order; returns the gradients' total norm before clipping (clip_gradients'), inf for
    a step the scaler skipped."""
    # A step the scaler skipped counts as non-finite whatever the norm says: an overflow in a 910B's saturation mode
    # leaves finite gradients, and in INF_NAN mode torch_npu's scaler decides per rank (docs/torch-npu.md, "AMP and
    # the scaler"). Its scale drops exactly then; a copy, since torch_npu's scaler scales in place.
    scaler = parts.scaler
    scale = scaler._get_scale_async().clone() if scaler.is_enabled() else None
    results = {}
    for name, run in OPTIMIZER_STEP:
        with phase(name.format(optimizer=type(parts.optimizer).__name__)):
            results[run] = run(parts)
    if scale is None:
        return results[clip_gradients]
    return torch.where(scaler._get_scale_async() < scale, math.inf, results[clip_gradients])
