"""Model summary: layer count, parameters and GFLOPs (torch.utils.flop_counter, 2 FLOPs per multiply-add)."""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class ModelSummary:
    layers: int
    parameters: int
    gradients: int
    gflops: float
    imgsz: int

    def __str__(self) -> str:
        return (f"{self.layers} layers, {self.parameters:,} parameters, {self.gradients:,} gradients, "
                f"{self.gflops:.1f} GFLOPs at {self.imgsz}x{self.imgsz}")


def _batch_norm_flops(x_shape, *args, out_shape=None, **kwargs) -> int:
    # The published GFLOPs are thop's op count doubled, and thop counts 4 ops per element of an affine BatchNorm: 8
    # FLOPs. With it our totals match docs/yolov5.md ("Parameter counts and FLOPs") within 1% for n..x (convs alone: 3%
    # short on n).
    return 8 * math.prod(x_shape)


def count_flops(model: nn.Module, imgsz: int = 640) -> float:
    """FLOPs of one forward pass of a (1, 3, imgsz, imgsz) image, counted on the meta device (no compute)."""
    from torch.utils.flop_counter import FlopCounterMode  # imports triton where installed: slow for every CLI start

    probe = copy.deepcopy(model).to("meta").eval()
    batch_norm = {torch.ops.aten._native_batch_norm_legit_no_training: _batch_norm_flops}
    with FlopCounterMode(display=False, custom_mapping=batch_norm) as counter, torch.no_grad():
        probe(torch.empty(1, 3, imgsz, imgsz, device="meta"))
    return float(counter.get_total_flops())


def summarize(model: nn.Module, imgsz: int = 640) -> ModelSummary:
    """Counts for `model`; layers are the modules that hold parameters or buffers directly."""
    layers = sum(1 for m in model.modules() if next(m.children(), None) is None)
    params = sum(p.numel() for p in model.parameters())
    grads = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return ModelSummary(layers, params, grads, count_flops(model, imgsz) / 1e9, imgsz)
