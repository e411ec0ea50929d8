"""Optimizer, learning-rate schedule, warmup and the weights' moving average (EMA) of yolov5's recipe (docs/yolov5.md,
"Training recipe")."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from detect.config import Hyp
from detect.data.device_batch import pick_size
from detect.errors import UserError, short_repr

# Gradients are accumulated up to this many images per optimizer step, and weight decay is scaled to it.
NOMINAL_BATCH = 64
OPTIMIZERS = ("SGD", "Adam", "AdamW")
# Warmup lasts at least this many iterations, however short the epochs
# (docs/yolov5.md, "Learning-rate schedule and warmup").
MIN_WARMUP_ITERATIONS = 100
ADAM_BETA2 = 0.999


@dataclasses.dataclass(frozen=True)
class OptimSettings:
    """What the optimizer, the schedule and the warmup read."""

    optimizer: str  # "SGD" | "Adam" | "AdamW"
    lr0: float
    lrf: float
    momentum: float
    weight_decay: float
    warmup_epochs: float
    warmup_momentum: float
    warmup_bias_lr: float
    cosine: bool = False

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"optimizer {short_repr(self.optimizer)}: choose one of {', '.join(OPTIMIZERS)}")

    @classmethod
    def from_hyp(cls, hyp: Hyp, optimizer: str = "SGD", cosine: bool = False) -> OptimSettings:
        """The optimizer fields of a hyp, plus the --optimizer and --cos-lr choices."""
        return cls(optimizer=optimizer, lr0=hyp.lr0, lrf=hyp.lrf, momentum=hyp.momentum,
                   weight_decay=hyp.weight_decay, warmup_epochs=hyp.warmup_epochs,
                   warmup_momentum=hyp.warmup_momentum, warmup_bias_lr=hyp.warmup_bias_lr, cosine=cosine)


def accumulate_steps(batch_size: int, nominal_batch: int = NOMINAL_BATCH) -> int:
    """Batches per optimizer step: max(round(64 / batch), 1), Python round (halves to even)."""
    return max(round(nominal_batch / batch_size), 1)


def parameter_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """(biases, weights with decay, weights of "Norm" modules) among the trainable parameters, in module order."""
    biases: list[nn.Parameter] = []
    decayed: list[nn.Parameter] = []
    norm_weights: list[nn.Parameter] = []
    for module in model.modules():
        norm = "Norm" in type(module).__name__
        for name, parameter in module.named_parameters(recurse=False):
            # Frozen parameters stay out: docs/yolov5.md says nothing of them, and they never get a gradient.
            if not parameter.requires_grad:
                continue
            if name == "bias":
                biases.append(parameter)
            elif name == "weight" and norm:
                norm_weights.append(parameter)
            else:
                decayed.append(parameter)
    return biases, decayed, norm_weights


def build_optimizer(model: nn.Module, optim: OptimSettings, batch_size: int) -> torch.optim.Optimizer:
    """SGD (Nesterov) / Adam / AdamW over three groups: [0] biases, [1] decayed weights, [2] Norm weights."""
    biases, decayed, norm_weights = parameter_groups(model)
    # Decay is scaled to the images per optimizer step, relative to the nominal batch
    # (docs/yolov5.md, "Optimizer and weight decay").
    decay = optim.weight_decay * batch_size * accumulate_steps(batch_size) / NOMINAL_BATCH
    # A list with one group dict (not bare parameters) lets a group be empty without torch refusing it.
    first = [{"params": biases}]
    if optim.optimizer == "SGD":
        optimizer = torch.optim.SGD(first, lr=optim.lr0, momentum=optim.momentum, nesterov=True)
    else:
        kind = torch.optim.Adam if optim.optimizer == "Adam" else torch.optim.AdamW
        # weight_decay=0 explicitly: AdamW would otherwise decay the biases by its default 0.01.
        optimizer = kind(first, lr=optim.lr0, betas=(optim.momentum, ADAM_BETA2), weight_decay=0.0)
    optimizer.add_param_group({"params": decayed, "weight_decay": decay})
    optimizer.add_param_group({"params": norm_weights, "weight_decay": 0.0})
    return optimizer


def lr_lambda(optim: OptimSettings, epochs: int) -> Callable[[float], float]:
    """lf(epoch), the factor on lr0: linear from 1 to lrf, or cosine with --cos-lr
    (docs/yolov5.md, "Learning-rate schedule and warmup")."""
    lrf = optim.lrf

    # Plain closures, not callable objects: LambdaLR.state_dict would pickle an object's fields into checkpoints.
    def linear(epoch: float) -> float:
        return (1 - epoch / epochs) * (1 - lrf) + lrf

    def cosine(epoch: float) -> float:
        return (1 - math.cos(math.pi * epoch / epochs)) / 2 * (lrf - 1) + 1

    return cosine if optim.cosine else linear


def build_scheduler(optimizer: torch.optim.Optimizer, optim: OptimSettings,
                    epochs: int) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR with lr_lambda, stepped once per epoch; it sets each group's "initial_lr" to lr0."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lr_lambda(optim, epochs))


def warmup_iterations(optim: OptimSettings, batches_per_epoch: int) -> int:
    """Iterations of warmup: max(round(warmup_epochs * batches per epoch), 100)."""
    return max(round(optim.warmup_epochs * batches_per_epoch), MIN_WARMUP_ITERATIONS)


def apply_warmup(optimizer: torch.optim.Optimizer, optim: OptimSettings, iteration: int, warmup_iters: int,
                 lr_factor: float, batch_size: int) -> int:
    """Set warmup LRs and momentum for `iteration` (while <= warmup_iters); return its accumulate steps."""
    if iteration > warmup_iters:
        return accumulate_steps(batch_size)
    ramp = [0, warmup_iters]

    def interpolate(start: float, end: float) -> float:
        return float(np.interp(iteration, ramp, [start, end]))

    momentum = interpolate(optim.warmup_momentum, optim.momentum)
    for index, group in enumerate(optimizer.param_groups):
        # The bias group falls from warmup_bias_lr, the others rise from 0, to lr0 * lf(epoch).
        start = optim.warmup_bias_lr if index == 0 else 0.0
        group["lr"] = interpolate(start, group["initial_lr"] * lr_factor)
        if "momentum" in group:  # SGD; yolov5 leaves Adam's betas alone during warmup
            group["momentum"] = momentum
    return max(round(interpolate(1, NOMINAL_BATCH / batch_size)), 1)


@dataclasses.dataclass(frozen=True)
class IterationPlan:
    """What each iteration's learning rate, accumulation and image size follow: warmup, accumulation to the nominal
    batch, the epoch's lr factor over the run's epochs, multi-scale sizes."""

    optim: OptimSettings
    global_batch: int
    warmup_iterations: int
    epochs: int
    multi_scale_sizes: tuple[int, ...] | None = None
    seed: int = 0

    def lr_factor(self, epoch: int) -> float:
        """The schedule's factor on lr0 in `epoch` (what the LambdaLR scheduler steps through)."""
        return lr_lambda(self.optim, self.epochs)(epoch)

    def prepare(self, optimizer: torch.optim.Optimizer, iteration: int, epoch: int) -> tuple[int, int | None]:
        """Set `iteration`'s warmup learning rates and momentum (apply_warmup); its accumulate steps and its
        multi-scale image size (None: the loader's)."""
        accumulate = apply_warmup(optimizer, self.optim, iteration, self.warmup_iterations, self.lr_factor(epoch),
                                  self.global_batch)
        return accumulate, pick_size(self.multi_scale_sizes, self.seed, iteration) if self.multi_scale_sizes else None


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
