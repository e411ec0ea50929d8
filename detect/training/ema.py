"""Exponential moving average of a model's weights and buffers, validated and saved beside it (YOLOV5-FACTS.md)."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain model inside DistributedDataParallel / DataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):  # torch.compile's OptimizedModule
            model = model._orig_mod
        else:
            return model


class ModelEMA:
    """Keeps `module`, an eval-mode copy whose state is d * itself + (1 - d) * the model's at each update."""

    def __init__(self, model: nn.Module, decay: float = 0.9999, tau: float = 2000, updates: int = 0) -> None:
        self.module = copy.deepcopy(unwrap_model(model)).eval()
        for parameter in self.module.parameters():
            parameter.requires_grad_(False)
            parameter.grad = None
        self.decay = decay
        self.tau = tau
        self.updates = updates

    def current_decay(self) -> float:
        """decay * (1 - exp(-updates / tau)): small early, so the average first follows the model closely."""
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Count one optimizer step, then average every float entry of the state dict; copy the others."""
        self.updates += 1
        decay = self.current_decay()
        source = unwrap_model(model).state_dict()
        averaged: list[torch.Tensor] = []
        latest: list[torch.Tensor] = []
        # state_dict() tensors share storage with the module, so in-place updates change the EMA model itself.
        for name, tensor in self.module.state_dict().items():
            if tensor.dtype.is_floating_point:  # weights, BN statistics, the anchors buffer
                averaged.append(tensor)
                latest.append(source[name].detach())
            else:  # counters such as BN num_batches_tracked: an average of integers means nothing
                tensor.copy_(source[name])
        if averaged:
            # One fused kernel per list instead of two per tensor; the same arithmetic as yolov5: v*d + (1-d)*m.
            torch._foreach_mul_(averaged, decay)
            torch._foreach_add_(averaged, latest, alpha=1 - decay)

    def state_dict(self) -> dict:
        """The averaged model's state dict and the update count: plain tensors and numbers."""
        return {"state_dict": self.module.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        """Restore what state_dict returned."""
        self.module.load_state_dict(state["state_dict"])
        self.updates = int(state["updates"])
