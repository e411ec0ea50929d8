"""Magnitude pruning of a model's convolutions, as yolov5's tutorial does it (utils/torch_utils.py, prune)."""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch.nn.utils import prune as torch_prune

LOGGER = logging.getLogger(__name__)


def sparsity(model: nn.Module) -> float:
    """The fraction of the model's parameters that are zero."""
    total = sum(parameter.numel() for parameter in model.parameters())
    zeros = sum(int((parameter == 0).sum()) for parameter in model.parameters())
    return zeros / max(total, 1)


def prune(model: nn.Module, amount: float = 0.3) -> float:
    """Zero the `amount` fraction of the smallest-magnitude Conv2d weights, ranked across all of them at once
    (torch's global unstructured L1 pruning), made permanent (no masks left, the state dict keeps its keys); logs and
    returns the model's sparsity (zeros among all its parameters, as yolov5 prints it). Modifies `model` in place."""
    if not 0 <= amount <= 1:
        raise ValueError(f"amount must be a fraction in [0, 1], got {amount}")
    weights = [(module, "weight") for module in model.modules() if isinstance(module, nn.Conv2d)]
    with torch.no_grad():
        torch_prune.global_unstructured(weights, pruning_method=torch_prune.L1Unstructured, amount=amount)
        for module, name in weights:
            torch_prune.remove(module, name)
    result = sparsity(model)
    LOGGER.info("pruned %.3g of the Conv2d weights: the model's global sparsity is %.3g", amount, result)
    return result
