"""One training epoch: warmup, forward and loss under autocast, scaled backward, accumulation, clipping, EMA; the parts
a step uses, built in one place for the trainer and the throughput tool; and how the loop and the trainer's hooks talk:
the hooks ask in `Control` (stop, save, end the run), the loop answers in the events it sends (`StepEnd`)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from detect.backend import Backend
from detect.config import Hyp
from detect.data import Batch, Loader
from detect.data.device_batch import DeviceBatch, pick_size, to_device_batch
from detect.errors import UserError
from detect.models import DetectionModel
from detect.training.distributed import DistContext, any_rank, entering
from detect.training.loss import DetectionLoss, LossSettings
from detect.training.optim import ModelEMA, OptimSettings, apply_warmup, build_optimizer, lr_lambda
from detect.training.resume import Counters

MAX_GRAD_NORM = 10.0  # gradient clipping after unscale (docs/yolov5.md, "Step order and gradient clip")
# A run stops after this many non-finite losses in a row: one is a bad batch, this many is a diverged run.
MAX_NONFINITE_STREAK = 10
POSTFIX_SECONDS = 0.5  # the progress bar's losses and memory are read at most this often
Criterion = Callable[[list[torch.Tensor], torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


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
    context: DistContext


def build_parts(model: DetectionModel, backend: Backend, hyp: Hyp, optim_settings: OptimSettings, batch_size: int,
                imgsz: int, *, context: DistContext | None = None, ema: ModelEMA | None = None,
                label_smoothing: float = 0.0, sync_bn: bool = False) -> TrainingParts:
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
    return TrainingParts(train_model, criterion, optimizer, scaler, ema, backend, context)


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


@dataclasses.dataclass
class Control:
    """What the hooks ask of the loop and the trainer; only the hooks' side writes it (a hook asks, the hook list
    withdraws a save once answered), the loop and the trainer read it. Any rank's ask holds for the job: the ranks
    agree at the next step boundary (the loop answers in StepEnd) or validation batch."""

    stop_signal: int | None = None  # stop at the next step boundary, last.pt written; exit 128 + this signal
    save_asked: bool = False  # write last.pt at the next step boundary (a mid-epoch save)
    end_training: bool = False  # end the run after this epoch (early stopping)

    def stop_asked(self) -> bool:
        """Whether a stop was asked on this rank (what a validation pass checks after each batch)."""
        return self.stop_signal is not None


@dataclasses.dataclass(frozen=True)
class StepEnd:
    """The loop's answer at the end of a step, sent with after_step: `save_now` when the ranks stopped at a step
    boundary that a save or a stop asked for (the counters then say where the epoch stands, for last.pt), `stopped`
    when a stop ends the epoch there."""

    save_now: bool = False
    stopped: bool = False


class StepHooks(Protocol):
    """The epoch loop's side of the hooks (the trainer's hook list, training/hooks.py): the requests it reads, the
    events it sends around each step."""

    @property
    def control(self) -> Control: ...

    def before_step(self, index: int, batch: Batch) -> None: ...

    def after_step(self, index: int, step: StepEnd) -> None: ...


class NoHooks:
    """No hook points, nothing asked (the loop alone, as benchmarks and tests run it)."""

    def __init__(self) -> None:
        self.control = Control()

    def before_step(self, index: int, batch: Batch) -> None:
        pass

    def after_step(self, index: int, step: StepEnd) -> None:
        pass


NO_HOOKS = NoHooks()


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """Mean loss terms of the epoch's steps, throughput, numerics and what went wrong on the way."""

    losses: tuple[float, float, float]  # box, obj, cls (not multiplied by the batch size)
    images: int  # on all ranks together
    seconds: float
    learning_rates: tuple[float, ...]
    nonfinite_steps: int  # batches skipped for a non-finite loss
    problems: tuple[str, ...]
    nonfinite_grad_steps: int = 0  # optimizer steps whose gradients were not finite (the GradScaler skips them)
    grad_norm_mean: float | None = None  # of the finite gradient norms before clipping
    grad_norm_max: float | None = None
    loss_scale_min: float | None = None  # the GradScaler's scale after each step (None: no loss scaling)
    loss_scale_last: float | None = None
    stopped: bool = False  # a stop asked ended the epoch at a step boundary (the counters say where)


class StepNumerics:
    """The epoch's gradient norms and loss scales, summed on the device (a step adds no host sync), read once."""

    def __init__(self, device: torch.device) -> None:
        zero = torch.zeros((), device=device)
        self.norm_sum, self.norm_max, self.finite, self.nonfinite = zero.clone(), zero.clone(), zero.clone(), zero
        self.scale_min: torch.Tensor | None = None
        self.scale_last: torch.Tensor | None = None

    def add(self, grad_norm: torch.Tensor, scaler: torch.amp.GradScaler) -> None:
        """One optimizer step: its gradients' total norm before clipping, and the scale the scaler goes on with."""
        finite = torch.isfinite(grad_norm)
        norm = torch.where(finite, grad_norm, 0.0)
        self.norm_sum, self.norm_max = self.norm_sum + norm, torch.maximum(self.norm_max, norm)
        self.finite, self.nonfinite = self.finite + finite, self.nonfinite + ~finite
        if scaler.is_enabled():
            scale = scaler._get_scale_async()  # the scale as a device tensor: get_scale() would sync the host
            self.scale_last = scale.detach().clone()
            self.scale_min = self.scale_last if self.scale_min is None else torch.minimum(self.scale_min, scale)

    def summary(self) -> dict[str, float | int | None]:
        """EpochStats' numerics fields (one host sync)."""
        norm_sum, norm_max, finite, nonfinite = torch.stack(
            [self.norm_sum, self.norm_max, self.finite, self.nonfinite]).tolist()
        scales = [None, None] if self.scale_min is None else torch.stack([self.scale_min, self.scale_last]).tolist()
        return {"nonfinite_grad_steps": int(nonfinite), "grad_norm_mean": norm_sum / finite if finite else None,
                "grad_norm_max": norm_max if finite else None, "loss_scale_min": scales[0], "loss_scale_last": scales[1]}


def optimizer_step(train_model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                   ema: ModelEMA | None) -> torch.Tensor:
    """unscale -> clip at 10 -> step -> update the scale -> zero grads -> EMA
    (docs/yolov5.md, "Step order and gradient clip"); returns the gradients' total norm before clipping (a device
    tensor)."""
    scaler.unscale_(optimizer)
    grad_norm = nn.utils.clip_grad_norm_(train_model.parameters(), max_norm=MAX_GRAD_NORM)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if ema is not None:
        ema.update(train_model)
    return grad_norm


def _forward_backward(parts: TrainingParts, batch: DeviceBatch, sync: bool,
                      control: Control) -> tuple[torch.Tensor | None, bool, bool]:
    """(loss items (3,) after the backward pass or None when the loss was not finite on some rank (no backward),
    whether any rank asks to stop, whether any rank asks to save)."""
    train_model, context = parts.train_model, parts.context
    # Gradients are all-reduced only on the micro-step that ends an accumulation (DDP no_sync before it).
    no_sync = context.distributed and not sync
    with train_model.no_sync() if no_sync else contextlib.nullcontext():
        if context.distributed:
            entering("DDP's forward (its broadcast of rank 0's BatchNorm buffers)")
        with parts.backend.autocast():
            loss, items = parts.criterion(train_model(batch.images), batch.padded_targets)
        # One host sync per step: the ranks must agree to skip (or DDP's backward would wait forever), to stop and to
        # save, so one all-reduce carries the three.
        asks = torch.tensor([False, control.stop_signal is not None, control.save_asked], device=loss.device)
        asks[0] = ~torch.isfinite(loss.detach())
        nonfinite, stop, save = any_rank(context, asks).tolist()
        if nonfinite:
            return None, stop, save
        if sync and context.distributed:
            entering("the gradient all-reduce of DDP's backward")
        # yolov5 multiplies by the world size because DDP averages the gradients (docs/yolov5.md, "Loss").
        parts.scaler.scale(loss * context.world_size).backward()
    return items, stop, save


def _postfix(backend: Backend, mean_losses: torch.Tensor, batch: Batch, size: int | None) -> str:
    """The progress bar's numbers after a step."""
    memory = backend.memory_stats().peak_bytes / 2**30
    box, obj, cls = mean_losses.tolist()
    return (f"mem {memory:.2f}G box {box:.4f} obj {obj:.4f} cls {cls:.4f} "
            f"instances {int(batch.target_counts.sum())} size {size or batch.images.shape[-1]}")


def train_one_epoch(parts: TrainingParts, loader: Loader, plan: IterationPlan, counters: Counters,
                    hooks: StepHooks = NO_HOOKS, show_progress: bool = True) -> EpochStats:
    """Train epoch counters.epoch over one pass of `loader` from batch counters.batch (a run resumed inside the epoch).
    At a step boundary that the hooks asked for (hooks.control: a save or a stop; every rank agrees), the counters
    record where the epoch stands and the after_step hooks get StepEnd.save_now; a stop then ends the epoch early
    (EpochStats.stopped). At the epoch's end the counters hold its last batch and sums (Counters.end_epoch starts the
    next one)."""
    train_model, optimizer, scaler, backend = parts.train_model, parts.optimizer, parts.scaler, parts.backend
    epoch, world_size = counters.epoch, parts.context.world_size
    train_model.train()
    loader.set_epoch(epoch, start_batch=counters.batch)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.tensor(counters.epoch_loss_sum, device=backend.device)
    steps, images, streak, nonfinite, problems = counters.epoch_steps, counters.epoch_images, 0, 0, []
    numerics = StepNumerics(backend.device)
    stop_asked = save_asked = stopped = False
    bar = tqdm(loader, desc=f"{epoch + 1}/{plan.epochs}", disable=not show_progress, leave=False, initial=counters.batch)
    started = next_postfix = time.perf_counter()
    for index, batch in enumerate(bar, start=counters.batch):
        hooks.before_step(index, batch)
        problems.extend(batch.problems)
        iteration = counters.iteration
        counters.iteration += 1
        accumulate = apply_warmup(optimizer, plan.optim, iteration, plan.warmup_iterations, plan.lr_factor(epoch),
                                  plan.global_batch)
        size = pick_size(plan.multi_scale_sizes, plan.seed, iteration) if plan.multi_scale_sizes else None
        step_now = iteration - counters.last_optimizer_step >= accumulate
        device_batch = to_device_batch(batch, backend, size)
        items, stop, save = _forward_backward(parts, device_batch, step_now, hooks.control)
        stop_asked, save_asked = stop_asked or stop, save_asked or save
        images += len(batch) * world_size
        if items is None:
            nonfinite, streak = nonfinite + 1, streak + 1
            if streak >= MAX_NONFINITE_STREAK:
                raise UserError(f"the loss was not finite for {streak} steps in a row (epoch {epoch + 1}, batch "
                                f"{index + 1}): the run diverged; lower lr0 in the hyp, or try --no-amp")
        else:
            streak = 0
            if step_now:
                numerics.add(optimizer_step(train_model, optimizer, scaler, parts.ema), scaler)
                counters.last_optimizer_step = iteration
            loss_sum += items
            steps += 1
        # No gradient waits between a boundary and the next step (the epoch's last batch drops its leftovers anyway).
        at_boundary = (items is not None and (stop_asked or save_asked)
                       and (step_now or index + 1 == len(loader)))
        if at_boundary:
            counters.batch, counters.epoch_steps, counters.epoch_images = index + 1, steps, images
            counters.epoch_loss_sum = loss_sum.tolist()
        stopped = at_boundary and stop_asked
        hooks.after_step(index, StepEnd(save_now=at_boundary, stopped=stopped))
        if stopped:
            break
        if at_boundary:
            save_asked = False
        if show_progress and steps and time.perf_counter() >= next_postfix:  # reading the losses is a host sync
            bar.set_postfix_str(_postfix(backend, loss_sum / steps, batch, size))
            next_postfix = time.perf_counter() + POSTFIX_SECONDS
    backend.synchronize()
    counters.nonfinite_steps += nonfinite
    if not stopped:  # every batch done; the trainer ends the epoch once it is validated
        counters.batch, counters.epoch_steps, counters.epoch_images = len(loader), steps, images
        counters.epoch_loss_sum = loss_sum.tolist()
    means = (loss_sum / max(steps, 1)).tolist()
    return EpochStats(losses=(means[0], means[1], means[2]), images=images, seconds=time.perf_counter() - started,
                      learning_rates=tuple(group["lr"] for group in optimizer.param_groups),
                      nonfinite_steps=nonfinite, problems=tuple(problems), stopped=stopped, **numerics.summary())
