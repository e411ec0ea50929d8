"""One training epoch: the steps (training/step.py) over one pass of the loader, with warmup and accumulation from the
iteration plan, the hooks called around each step (training/control.py), the losses, numerics and problems tallied
into EpochStats; a run resumed inside an epoch starts at its batch."""

from __future__ import annotations

import dataclasses
import time

import torch
from tqdm import tqdm

from detect.backend import Backend
from detect.data import Batch, Loader
from detect.errors import UserError
from detect.training.control import NO_HOOKS, StepEnd, StepHooks
from detect.training.optim import IterationPlan
from detect.training.resume import Counters
from detect.training.step import TrainingParts, forward_backward, optimizer_step, to_device

# A run stops after this many non-finite losses in a row: one is a bad batch, this many is a diverged run.
MAX_NONFINITE_STREAK = 10
POSTFIX_SECONDS = 0.5  # the progress bar's losses and memory are read at most this often


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """Mean loss terms of the epoch's steps, throughput, numerics and what went wrong on the way."""

    losses: tuple[float, float, float]  # box, obj, cls (not multiplied by the batch size)
    images: int  # on all ranks together
    seconds: float
    learning_rates: tuple[float, ...]
    nonfinite_steps: int  # batches skipped for a non-finite loss
    problems: tuple[str, ...]
    nonfinite_grad_steps: int = 0  # optimizer steps whose gradients were not finite or that the GradScaler skipped
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


def _postfix(backend: Backend, mean_losses: torch.Tensor, batch: Batch, size: int | None) -> str:
    """The progress bar's numbers after a step."""
    memory = backend.memory_stats().peak_bytes / 2**30
    box, obj, cls = mean_losses.tolist()
    return (f"mem {memory:.2f}G box {box:.4f} obj {obj:.4f} cls {cls:.4f} "
            f"instances {int(batch.target_counts.sum())} size {size or batch.images.shape[-1]}")


class _Tally:
    """An epoch's running sums (resumed from the counters, the loss summed on the device), the asks the ranks agreed
    on since the last boundary, the steps skipped for a non-finite loss and what the batches reported."""

    def __init__(self, counters: Counters, device: torch.device) -> None:
        self.loss_sum = torch.tensor(counters.epoch_loss_sum, device=device)
        self.steps, self.images, self.streak, self.nonfinite = counters.epoch_steps, counters.epoch_images, 0, 0
        self.problems: list[str] = []
        self.numerics = StepNumerics(device)
        self.stop_asked = self.save_asked = False

    def add(self, batch: Batch, images: int, items: torch.Tensor | None, asks: tuple[bool, bool], where: str) -> None:
        """A step's batch (`images` on every rank), its loss items (None: not finite, skipped) and the asks agreed on;
        a streak of non-finite losses ends the run (`where` names its step)."""
        self.problems.extend(batch.problems)
        self.images += images
        self.stop_asked, self.save_asked = self.stop_asked or asks[0], self.save_asked or asks[1]
        if items is None:
            self.nonfinite, self.streak = self.nonfinite + 1, self.streak + 1
            if self.streak >= MAX_NONFINITE_STREAK:
                raise UserError(f"the loss was not finite for {self.streak} steps in a row ({where}): the run "
                                "diverged; lower lr0 in the hyp, or try --no-amp")
            return
        self.streak, self.steps = 0, self.steps + 1
        self.loss_sum += items

    def write(self, counters: Counters, batches_done: int) -> None:
        """Where the epoch stands, into the counters (what last.pt keeps)."""
        counters.batch, counters.epoch_steps, counters.epoch_images = batches_done, self.steps, self.images
        counters.epoch_loss_sum = self.loss_sum.tolist()

    def stats(self, optimizer: torch.optim.Optimizer, seconds: float, stopped: bool) -> EpochStats:
        means = (self.loss_sum / max(self.steps, 1)).tolist()
        return EpochStats(losses=(means[0], means[1], means[2]), images=self.images, seconds=seconds,
                          learning_rates=tuple(group["lr"] for group in optimizer.param_groups),
                          nonfinite_steps=self.nonfinite, problems=tuple(self.problems), stopped=stopped,
                          **self.numerics.summary())


def train_one_epoch(parts: TrainingParts, loader: Loader, plan: IterationPlan, counters: Counters,
                    hooks: StepHooks = NO_HOOKS, show_progress: bool = True) -> EpochStats:
    """Train epoch counters.epoch over one pass of `loader` from batch counters.batch (a run resumed inside the epoch).
    At a step boundary that the hooks asked for (hooks.control: a save or a stop; every rank agrees), the counters
    record where the epoch stands and the after_step hooks get StepEnd.save_now; a stop then ends the epoch early
    (EpochStats.stopped). At the epoch's end the counters hold its last batch and sums (Counters.end_epoch starts the
    next one)."""
    epoch, backend, optimizer = counters.epoch, parts.backend, parts.optimizer
    parts.train_model.train()
    loader.set_epoch(epoch, start_batch=counters.batch)
    optimizer.zero_grad(set_to_none=True)
    tally, stopped, started = _Tally(counters, backend.device), False, time.perf_counter()
    bar = tqdm(loader, desc=f"{epoch + 1}/{plan.epochs}", disable=not show_progress, leave=False, initial=counters.batch)
    progress = _Progress(bar, backend, show_progress)
    for index, batch in enumerate(bar, start=counters.batch):
        hooks.before_step(index, batch)
        iteration, counters.iteration = counters.iteration, counters.iteration + 1
        accumulate, size = plan.prepare(optimizer, iteration, epoch)
        step_now = iteration - counters.last_optimizer_step >= accumulate
        items, *asks = forward_backward(parts, to_device(parts, batch, size), step_now, hooks.control)
        if items is not None and step_now:
            tally.numerics.add(optimizer_step(parts), parts.scaler)
            counters.last_optimizer_step = iteration
        tally.add(batch, len(batch) * parts.context.world_size, items, asks, f"epoch {epoch + 1}, batch {index + 1}")
        # No gradient waits between a boundary and the next step (the epoch's last batch drops its leftovers anyway).
        at_boundary = (items is not None and (tally.stop_asked or tally.save_asked)
                       and (step_now or index + 1 == len(loader)))
        if at_boundary:
            tally.write(counters, index + 1)
        stopped = at_boundary and tally.stop_asked
        hooks.after_step(index, StepEnd(save_now=at_boundary, stopped=stopped))
        if stopped:
            break
        tally.save_asked = tally.save_asked and not at_boundary
        progress.show(tally, batch, size)
    backend.synchronize()
    counters.nonfinite_steps += tally.nonfinite
    if not stopped:  # every batch done; the trainer ends the epoch once it is validated
        tally.write(counters, len(loader))
    return tally.stats(optimizer, time.perf_counter() - started, stopped)


class _Progress:
    """The progress bar's losses, memory and size, read at most every POSTFIX_SECONDS (reading them syncs the host)."""

    def __init__(self, bar: tqdm, backend: Backend, shown: bool) -> None:
        self.bar, self.backend, self.shown, self.next = bar, backend, shown, time.perf_counter()

    def show(self, tally: _Tally, batch: Batch, size: int | None) -> None:
        if self.shown and tally.steps and time.perf_counter() >= self.next:
            self.bar.set_postfix_str(_postfix(self.backend, tally.loss_sum / tally.steps, batch, size))
            self.next = time.perf_counter() + POSTFIX_SECONDS
