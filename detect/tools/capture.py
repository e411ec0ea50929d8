"""One forward and backward pass of a model under one backend, every layer's output and gradient kept; and the
differences between two such captures, layer by layer."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math

import torch
from torch import nn

from detect import backend as backends
from detect.data.batch import Batch
from detect.data.device_batch import to_device_batch
from detect.models import DetectionModel
from detect.tools.workload import build_criterion

# fp16 gradients of the unscaled loss underflow; scale as torch's GradScaler starts (2**16), then divide it out.
FP16_LOSS_SCALE = 2.0**16
LOSS_TERMS = ("loss", "box", "obj", "cls")


@dataclasses.dataclass(frozen=True)
class Capture:
    """What one setting computed, float64 on the CPU: each layer's output (flattened), the loss (total and its
    three terms) and each layer's parameter gradients (flattened; None for a layer without parameters)."""

    layers: tuple[str, ...]
    outputs: tuple[torch.Tensor, ...]
    losses: torch.Tensor
    gradients: tuple[torch.Tensor | None, ...]


@dataclasses.dataclass(frozen=True)
class Difference:
    """B against A for one tensor: A's range, max and mean |A - B|, and both relative to A's max and mean |A|."""

    name: str
    low: float
    high: float
    max_abs: float
    mean_abs: float
    max_rel: float
    mean_rel: float

    def drifts(self, tolerance: float) -> bool:
        """Whether the mean relative difference is past `tolerance` (a non-finite one always is)."""
        return not self.mean_rel <= tolerance


def layer_names(model: DetectionModel) -> tuple[str, ...]:
    """`model.<index> <Type>` for each top-level layer, as the parameters are named."""
    return tuple(f"model.{index} {type(layer).__name__}" for index, layer in enumerate(model.model))


def _flat(output: torch.Tensor | list | tuple) -> torch.Tensor:
    """A layer's output as one float64 vector on the CPU (the Detect head returns tensors in lists and tuples)."""
    if isinstance(output, torch.Tensor):
        return output.detach().double().cpu().flatten()
    return torch.cat([_flat(part) for part in output])


def _keep(store: dict[int, torch.Tensor], index: int, module: nn.Module, inputs: object, output: object) -> None:
    store[index] = _flat(output)


def _layer_gradient(layer: nn.Module, scale: float) -> torch.Tensor | None:
    grads = [p.grad.double().cpu().flatten() / scale for p in layer.parameters() if p.grad is not None]
    return torch.cat(grads) if grads else None


def capture(model: DetectionModel, batch: Batch, backend: backends.Backend, imgsz: int, train: bool = True) -> Capture:
    """Run a copy of `model` on `batch` under `backend`'s device and autocast; train mode (BatchNorm on batch
    statistics, as in training) or eval mode (running statistics, as in validation)."""
    model = copy.deepcopy(model).to(backend.device).train(train)
    images = to_device_batch(batch, backend).images
    if backend.channels_last:  # to_device_batch gave the images in this format
        model = model.to(memory_format=torch.channels_last)
    targets = backend.to_device(batch.padded_targets)
    criterion = build_criterion(model, imgsz)
    outputs: dict[int, torch.Tensor] = {}
    hooks = [layer.register_forward_hook(functools.partial(_keep, outputs, index))
             for index, layer in enumerate(model.model)]
    try:
        with backend.autocast():
            output = model(images)
            loss, items = criterion(output, targets)  # raw head outputs in both modes
    finally:
        for hook in hooks:
            hook.remove()
    scale = FP16_LOSS_SCALE if backend.amp_dtype == torch.float16 else 1.0
    (loss * scale).backward()
    losses = torch.cat([loss.detach().reshape(1), items]).double().cpu()
    return Capture(layer_names(model), tuple(outputs[index] for index in range(len(model.model))), losses,
                   tuple(_layer_gradient(layer, scale) for layer in model.model))


def _ratio(part: float, whole: float) -> float:
    """part / whole; a difference from an all-zero A is infinitely relative, no difference is 0."""
    if part == 0:
        return 0.0
    return part / whole if whole > 0 else math.inf


def difference(name: str, a: torch.Tensor, b: torch.Tensor) -> Difference:
    """How far B is from A (same shape); a non-finite value in B is an infinite relative difference."""
    delta = (a - b).abs()
    max_abs, mean_abs = float(delta.max()), float(delta.mean())
    max_rel, mean_rel = _ratio(max_abs, float(a.abs().max())), _ratio(mean_abs, float(a.abs().mean()))
    if not bool(torch.isfinite(b).all()):
        max_rel = mean_rel = math.inf
    return Difference(name, float(a.min()), float(a.max()), max_abs, mean_abs, max_rel, mean_rel)


def differences(a: Capture, b: Capture) -> tuple[list[Difference], list[Difference], list[Difference]]:
    """(layer outputs, loss terms, layer gradients) of B against A; layers without parameters have no gradient."""
    if a.layers != b.layers:
        raise ValueError("the two models have different layers")
    outputs = [difference(name, x, y) for name, x, y in zip(a.layers, a.outputs, b.outputs)]
    losses = [difference(term, a.losses[i : i + 1], b.losses[i : i + 1]) for i, term in enumerate(LOSS_TERMS)]
    gradients = [difference(name, x, y) for name, x, y in zip(a.layers, a.gradients, b.gradients) if x is not None]
    return outputs, losses, gradients
