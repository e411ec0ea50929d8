"""One training epoch: warmup, forward and loss under autocast, scaled backward, accumulation, clipping, EMA."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import torch
from torch import nn
from tqdm import tqdm

from detect.backend import Backend
from detect.data import Batch, Loader
from detect.data.device_batch import pick_size, to_device_batch
from detect.errors import UserError
from detect.training.distributed import DistContext, all_ranks_true
from detect.training.ema import ModelEMA
from detect.training.loss import DetectionLoss
from detect.training.optim import OptimSettings, apply_warmup
from detect.training.state import Progress

MAX_GRAD_NORM = 10.0  # gradient clipping after unscale (YOLOV5-FACTS.md, step order)
# A run stops after this many non-finite losses in a row: one is a bad batch, this many is a diverged run.
MAX_NONFINITE_STREAK = 10


@dataclasses.dataclass
class StepParts:
    """What a training step uses; model may be DDP-wrapped, ema exists on rank 0 only."""

    model: nn.Module
    criterion: DetectionLoss
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ema: ModelEMA | None
    backend: Backend
    context: DistContext
    optim_settings: OptimSettings
    global_batch: int
    warmup_iterations: int
    lr_factor: Callable[[float], float]
    multi_scale_sizes: tuple[int, ...] | None
    seed: int
    channels_last: bool


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """Mean loss terms of the epoch's steps, throughput and what went wrong on the way."""

    losses: tuple[float, float, float]  # box, obj, cls (not multiplied by the batch size)
    images: int  # on all ranks together
    seconds: float
    learning_rates: tuple[float, ...]
    nonfinite_steps: int
    problems: tuple[str, ...]


def optimizer_step(parts: StepParts) -> None:
    """unscale -> clip at 10 -> step -> update the scale -> zero grads -> EMA (YOLOV5-FACTS.md step order)."""
    parts.scaler.unscale_(parts.optimizer)
    nn.utils.clip_grad_norm_(parts.model.parameters(), max_norm=MAX_GRAD_NORM)
    parts.scaler.step(parts.optimizer)
    parts.scaler.update()
    parts.optimizer.zero_grad(set_to_none=True)
    if parts.ema is not None:
        parts.ema.update(parts.model)


def _forward_backward(parts: StepParts, batch: Batch, size: int | None, sync: bool) -> torch.Tensor | None:
    """Loss items (3,) of one batch after its backward pass, or None when the loss was not finite (no backward)."""
    device_batch = to_device_batch(batch, parts.backend, size)
    images = device_batch.images
    if parts.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    # Gradients are all-reduced only on the micro-step that ends an accumulation (DDP no_sync before it).
    no_sync = parts.context.distributed and not sync
    with parts.model.no_sync() if no_sync else contextlib.nullcontext():
        with parts.backend.autocast():
            loss, items = parts.criterion(parts.model(images), device_batch.padded_targets)
        # One host sync per step: every rank must agree to skip, or DDP's backward would wait forever.
        if not bool(all_ranks_true(parts.context, torch.isfinite(loss))):
            return None
        # yolov5 multiplies by the world size because DDP averages the gradients (YOLOV5-FACTS.md, loss).
        parts.scaler.scale(loss * parts.context.world_size).backward()
    return items


def train_one_epoch(parts: StepParts, loader: Loader, epoch: int, epochs: int, progress: Progress,
                    show_progress: bool = True, on_batch: Callable[[int, Batch], None] | None = None) -> EpochStats:
    """Train over one pass of `loader`; `progress` counts iterations and optimizer steps across epochs."""
    parts.model.train()
    loader.set_epoch(epoch)
    parts.optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.zeros(3, device=parts.backend.device)
    steps, images, streak, nonfinite, problems = 0, 0, 0, 0, []
    bar = tqdm(loader, desc=f"{epoch + 1}/{epochs}", disable=not show_progress, leave=False)
    started = time.perf_counter()
    for index, batch in enumerate(bar):
        if on_batch is not None:
            on_batch(index, batch)
        problems.extend(batch.problems)
        iteration = progress.iteration
        progress.iteration += 1
        accumulate = apply_warmup(parts.optimizer, parts.optim_settings, iteration, parts.warmup_iterations,
                                  parts.lr_factor(epoch), parts.global_batch)
        size = pick_size(parts.multi_scale_sizes, parts.seed, iteration) if parts.multi_scale_sizes else None
        step_now = iteration - progress.last_optimizer_step >= accumulate
        items = _forward_backward(parts, batch, size, sync=step_now)
        images += len(batch) * parts.context.world_size
        if items is None:
            nonfinite, streak = nonfinite + 1, streak + 1
            if streak >= MAX_NONFINITE_STREAK:
                raise UserError(f"the loss was not finite for {streak} steps in a row (epoch {epoch + 1}, batch "
                                f"{index + 1}): the run diverged; lower lr0 in the hyp, or try --no-amp")
            continue
        streak = 0
        if step_now:
            optimizer_step(parts)
            progress.last_optimizer_step = iteration
        loss_sum += items
        steps += 1
        if show_progress:
            memory = parts.backend.memory_stats().peak_bytes / 2**30
            box, obj, cls = (loss_sum / steps).tolist()
            bar.set_postfix_str(f"mem {memory:.2f}G box {box:.4f} obj {obj:.4f} cls {cls:.4f} "
                                f"instances {int(batch.target_counts.sum())} size {size or batch.images.shape[-1]}")
    parts.backend.synchronize()
    progress.nonfinite_steps += nonfinite
    means = (loss_sum / max(steps, 1)).tolist()
    return EpochStats(losses=(means[0], means[1], means[2]), images=images, seconds=time.perf_counter() - started,
                      learning_rates=tuple(group["lr"] for group in parts.optimizer.param_groups),
                      nonfinite_steps=nonfinite, problems=tuple(problems))
