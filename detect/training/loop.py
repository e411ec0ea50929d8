"""One training epoch: warmup, forward and loss under autocast, scaled backward, accumulation, clipping, EMA; and the
step it repeats, built in one place for the trainer and the throughput tool."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from detect.backend import Backend
from detect.config import Hyp
from detect.data import Batch, Loader
from detect.data.device_batch import pick_size, to_device_batch
from detect.errors import UserError
from detect.models import DetectionModel
from detect.training.checkpoints import Progress
from detect.training.distributed import DistContext, any_rank
from detect.training.ema import ModelEMA
from detect.training.loss import DetectionLoss, LossSettings
from detect.training.optim import OptimSettings, apply_warmup, build_optimizer
from detect.training.preemption import Requests

MAX_GRAD_NORM = 10.0  # gradient clipping after unscale (YOLOV5-FACTS.md, step order)
# A run stops after this many non-finite losses in a row: one is a bad batch, this many is a diverged run.
MAX_NONFINITE_STREAK = 10
POSTFIX_SECONDS = 0.5  # the progress bar's losses and memory are read at most this often


@dataclasses.dataclass(frozen=True)
class Step:
    """What a training step uses; `model` may be DDP-wrapped, `ema` exists on rank 0 only."""

    model: nn.Module
    criterion: Callable[[list[torch.Tensor], torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ema: ModelEMA | None
    backend: Backend
    context: DistContext


def build_step(model: DetectionModel, backend: Backend, hyp: Hyp, optim_settings: OptimSettings, batch_size: int,
               imgsz: int, *, context: DistContext | None = None, ema: ModelEMA | None = None,
               label_smoothing: float = 0.0, sync_bn: bool = False) -> Step:
    """yolov5's optimizer groups, the GradScaler and the loss for `model` (already on the backend's device), wrapped
    in DDP (with SyncBatchNorm when asked) under torchrun; `batch_size` is the global batch. The backend's process-wide
    settings for repeated steps are applied (Backend.prepare_steps)."""
    context = context or DistContext()
    backend.prepare_steps()
    optimizer = build_optimizer(model, optim_settings, batch_size)
    scaler = backend.grad_scaler(init_scale=hyp.amp_init_scale, growth_factor=hyp.amp_growth_factor,
                                 growth_interval=hyp.amp_growth_interval)
    loss_settings = LossSettings.from_hyp(hyp, model.detect.nl, model.nc, imgsz, label_smoothing)
    criterion = DetectionLoss(loss_settings, model.detect.anchors, model.nc, matched_only=backend.dynamic_shapes)
    train_model: nn.Module = model
    if context.distributed:
        if sync_bn:
            train_model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        # DDP broadcasts rank 0's parameters and buffers (the AutoAnchor result included) to every rank.
        device_ids = None if backend.device.type == "cpu" else [backend.device.index]
        train_model = DistributedDataParallel(train_model, device_ids=device_ids)
    return Step(train_model, criterion, optimizer, scaler, ema, backend, context)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How the epochs drive the steps: warmup, accumulation to the nominal batch, multi-scale sizes."""

    optim: OptimSettings
    global_batch: int
    warmup_iterations: int
    lr_factor: Callable[[float], float]
    multi_scale_sizes: tuple[int, ...] | None = None
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """Mean loss terms of the epoch's steps, throughput and what went wrong on the way."""

    losses: tuple[float, float, float]  # box, obj, cls (not multiplied by the batch size)
    images: int  # on all ranks together
    seconds: float
    learning_rates: tuple[float, ...]
    nonfinite_steps: int
    problems: tuple[str, ...]
    stopped: bool = False  # a signal stopped the epoch at a step boundary (Progress.batch says where)


def optimizer_step(step: Step) -> None:
    """unscale -> clip at 10 -> step -> update the scale -> zero grads -> EMA (YOLOV5-FACTS.md step order)."""
    step.scaler.unscale_(step.optimizer)
    nn.utils.clip_grad_norm_(step.model.parameters(), max_norm=MAX_GRAD_NORM)
    step.scaler.step(step.optimizer)
    step.scaler.update()
    step.optimizer.zero_grad(set_to_none=True)
    if step.ema is not None:
        step.ema.update(step.model)


def _forward_backward(step: Step, batch: Batch, size: int | None, sync: bool,
                      requests: Requests) -> tuple[torch.Tensor | None, bool, bool]:
    """(loss items (3,) after the backward pass or None when the loss was not finite on some rank (no backward),
    whether any rank asks to stop, whether rank 0 asks to save)."""
    device_batch = to_device_batch(batch, step.backend, size)
    images = device_batch.images
    # Gradients are all-reduced only on the micro-step that ends an accumulation (DDP no_sync before it).
    no_sync = step.context.distributed and not sync
    with step.model.no_sync() if no_sync else contextlib.nullcontext():
        with step.backend.autocast():
            loss, items = step.criterion(step.model(images), device_batch.padded_targets)
        # One host sync per step: the ranks must agree to skip (or DDP's backward would wait forever), to stop and to
        # save, so one all-reduce carries the three.
        asks = torch.tensor([False, requests.stop, requests.save], device=loss.device)
        asks[0] = ~torch.isfinite(loss.detach())
        nonfinite, stop, save = any_rank(step.context, asks).tolist()
        if nonfinite:
            return None, stop, save
        # yolov5 multiplies by the world size because DDP averages the gradients (YOLOV5-FACTS.md, loss).
        step.scaler.scale(loss * step.context.world_size).backward()
    return items, stop, save


def _postfix(step: Step, mean_losses: torch.Tensor, batch: Batch, size: int | None) -> str:
    """The progress bar's numbers after a step."""
    memory = step.backend.memory_stats().peak_bytes / 2**30
    box, obj, cls = mean_losses.tolist()
    return (f"mem {memory:.2f}G box {box:.4f} obj {obj:.4f} cls {cls:.4f} "
            f"instances {int(batch.target_counts.sum())} size {size or batch.images.shape[-1]}")


def _save_point(progress: Progress, batches: int, steps: int, images: int, loss_sum: torch.Tensor,
                on_save: Callable[[], None] | None) -> None:
    """Record in `progress` where the epoch stands after `batches` batches, then let `on_save` write it."""
    progress.batch, progress.epoch_steps, progress.epoch_images = batches, steps, images
    progress.epoch_loss_sum = loss_sum.tolist()
    if on_save is not None:
        on_save()


def train_one_epoch(step: Step, schedule: Schedule, loader: Loader, epoch: int, epochs: int, progress: Progress,
                    show_progress: bool = True, on_batch: Callable[[int, Batch], None] | None = None,
                    requests: Requests | None = None, on_save: Callable[[], None] | None = None) -> EpochStats:
    """Train over one pass of `loader` from batch progress.batch (a run resumed inside the epoch); `progress` counts
    iterations and optimizer steps across epochs. At a step boundary that `requests` asks for (all ranks agree),
    progress.batch and the epoch's sums are set and `on_save` called; a stop then ends the epoch early."""
    requests = requests or Requests()
    step.model.train()
    loader.set_epoch(epoch, start_batch=progress.batch)
    step.optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.tensor(progress.epoch_loss_sum, device=step.backend.device)
    steps, images, streak, nonfinite, problems = progress.epoch_steps, progress.epoch_images, 0, 0, []
    stop_asked = save_asked = stopped = False
    bar = tqdm(loader, desc=f"{epoch + 1}/{epochs}", disable=not show_progress, leave=False, initial=progress.batch)
    started = next_postfix = time.perf_counter()
    for index, batch in enumerate(bar, start=progress.batch):
        if on_batch is not None:
            on_batch(index, batch)
        problems.extend(batch.problems)
        iteration = progress.iteration
        progress.iteration += 1
        accumulate = apply_warmup(step.optimizer, schedule.optim, iteration, schedule.warmup_iterations,
                                  schedule.lr_factor(epoch), schedule.global_batch)
        sizes = schedule.multi_scale_sizes
        size = pick_size(sizes, schedule.seed, iteration) if sizes else None
        step_now = iteration - progress.last_optimizer_step >= accumulate
        items, stop, save = _forward_backward(step, batch, size, sync=step_now, requests=requests)
        stop_asked, save_asked = stop_asked or stop, save_asked or save
        images += len(batch) * step.context.world_size
        if items is None:
            nonfinite, streak = nonfinite + 1, streak + 1
            if streak >= MAX_NONFINITE_STREAK:
                raise UserError(f"the loss was not finite for {streak} steps in a row (epoch {epoch + 1}, batch "
                                f"{index + 1}): the run diverged; lower lr0 in the hyp, or try --no-amp")
            continue
        streak = 0
        if step_now:
            optimizer_step(step)
            progress.last_optimizer_step = iteration
        loss_sum += items
        steps += 1
        # No gradient waits between a boundary and the next step (the epoch's last batch drops its leftovers anyway).
        if (stop_asked or save_asked) and (step_now or index + 1 == len(loader)):
            _save_point(progress, index + 1, steps, images, loss_sum, on_save)
            requests.saved()
            save_asked, stopped = False, stop_asked
            if stopped:
                break
        if show_progress and time.perf_counter() >= next_postfix:  # reading the losses is a host sync
            bar.set_postfix_str(_postfix(step, loss_sum / steps, batch, size))
            next_postfix = time.perf_counter() + POSTFIX_SECONDS
    step.backend.synchronize()
    progress.nonfinite_steps += nonfinite
    if not stopped:
        progress.end_epoch()
    means = (loss_sum / max(steps, 1)).tolist()
    return EpochStats(losses=(means[0], means[1], means[2]), images=images, seconds=time.perf_counter() - started,
                      learning_rates=tuple(group["lr"] for group in step.optimizer.param_groups),
                      nonfinite_steps=nonfinite, problems=tuple(problems), stopped=stopped)
