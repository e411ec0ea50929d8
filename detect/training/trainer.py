"""The Trainer: epoch by epoch train, validate, log and save a run that build.py set up. `fit` is the table of
contents."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from detect import backend as backends
from detect.backend.profiler import ProfileSchedule, find_trace, format_summary, summarize
from detect.data import Batch
from detect.data.plots import plot_batch
from detect.errors import Interrupted, UserError
from detect.evaluation.checkpoint import evaluate_checkpoint
from detect.evaluation.evaluator import Metrics
from detect.evaluation.loop import EvalSettings, evaluate
from detect.models.checkpoint import save_checkpoint
from detect.models.weights import model_state
from detect.training.build import Run, build_run
from detect.training.checkpoints import build_payload, rng_state
from detect.training.distributed import (
    DistContext,
    broadcast_object,
    destroy_process_group,
    gather_objects,
    replicas_in_sync,
)
from detect.training.loop import EpochStats, train_one_epoch
from detect.training.preemption import Requests, handle_signals
from detect.training.results import epoch_line, epoch_row
from detect.training.settings import TrainSettings

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Where a finished run left its files, and the final evaluation of its best weights (rank 0 only)."""

    save_dir: Path
    best: Path | None
    last: Path | None
    metrics: Metrics | None
    epochs_run: int


class Trainer:
    """One training run; every rank builds one, rank 0 alone evaluates and writes."""

    def __init__(self, settings: TrainSettings, context: DistContext | None = None, resume: bool | str = False,
                 resume_overrides: dict[str, Any] | None = None, profile: ProfileSchedule | None = None) -> None:
        """resume: False, True (the latest <project>/*/weights/last.pt) or a checkpoint path; a resumed run takes its
        stored settings, with `resume_overrides` (e.g. device, workers) replacing some. profile: record these steps
        of this process's first epoch on rank 0 (--profile)."""
        self.settings, self.context = settings, context or DistContext.from_env()
        self.resume, self.resume_overrides, self.profile = resume, resume_overrides, profile
        self.problems: list[str] = []

    def fit(self) -> FitResult:
        """Train the run's epochs (from where a resumed run stopped); returns where the results are."""
        run = build_run(self.settings, self.context, self.resume, self.resume_overrides)
        first_epoch = run.progress.epoch
        try:
            with handle_signals(Requests(run.settings.save_minutes, keeps_time=run.context.is_main)) as requests:
                self.train_epochs(run, requests)
            return self.finish(run, run.progress.epoch - first_epoch)
        finally:
            destroy_process_group(run.context)

    def train_epochs(self, run: Run, requests: Requests) -> None:
        """Epoch by epoch: train, step the schedule, validate, log and save, until the last epoch or early stopping;
        a signal stops at the next step boundary with last.pt written (Interrupted)."""
        first_epoch = run.progress.epoch
        for epoch in range(first_epoch, run.settings.epochs):
            with self.batch_hook(run, epoch == first_epoch) as on_batch, run.phases.time("training"):
                stats = train_one_epoch(run.step, run.schedule, run.train_loader, epoch, run.settings.epochs,
                                        run.progress, show_progress=run.validation is not None and run.settings.progress,
                                        on_batch=on_batch, requests=requests, on_save=lambda: self.save_inside_epoch(run))
            if stats.stopped:
                raise self.stopped(run, epoch, requests.signal_number)
            run.scheduler.step()
            with run.phases.time("validation"):
                metrics = self.validate(run, epoch)
            self.end_epoch(run, epoch, stats, metrics)
            if broadcast_object(run.context, self.should_stop(run, epoch)):
                return

    @contextlib.contextmanager
    def batch_hook(self, run: Run, first: bool) -> Iterator[Callable[[int, Batch], None] | None]:
        """train_one_epoch's on_batch in this process's first epoch, on rank 0: train_batch0..2.jpg (what the network
        sees after augmentation) and, with --profile, the profiler's step; the profiler ends with the epoch, so
        validation stays out of the trace, and its summary is logged."""
        if not first or run.validation is None:
            yield None
            return

        def plot(index: int, batch: Batch) -> None:
            if index < 3 and not run.settings.noplots:
                plot_batch(batch, run.train_loader.names, run.folder.save_dir / f"train_batch{index}.jpg")

        if self.profile is None:
            yield plot
            return
        folder = run.folder.save_dir / "profile"
        with run.backend.profiler(folder, self.profile) as profiler:
            def on_batch(index: int, batch: Batch) -> None:
                plot(index, batch)  # plots fall in waiting steps, before any recorded one
                profiler.step()

            yield on_batch
        try:
            LOGGER.info("%s", format_summary(summarize(find_trace(folder))))
        except UserError as error:  # a first epoch shorter than the schedule records nothing; training goes on
            LOGGER.warning("--profile: %s (the schedule needs %d)", error, self.profile.steps)

    def validate(self, run: Run, epoch: int) -> Metrics | None:
        """COCO metrics of the EMA weights on rank 0 (every epoch, or only the last with --noval)."""
        final = epoch + 1 == run.settings.epochs
        if run.validation is None or (run.settings.noval and not final):
            return None
        run.validation.evaluator.reset()
        with run.backend.autocast():  # fp16 on accelerators when AMP is on, as yolov5 validates during training
            result = evaluate(run.step.ema.module.predict, run.validation.loader, run.backend,
                              run.validation.evaluator, EvalSettings(), progress=run.settings.progress)
        self.problems.extend(result.problems)
        return result.metrics

    def end_epoch(self, run: Run, epoch: int, stats: EpochStats, metrics: Metrics | None) -> None:
        """Gather problems, log the epoch's row, save last/best/periodic checkpoints (rank 0 writes)."""
        problems = gather_objects(run.context, stats.problems)
        progress = run.progress
        if run.validation is None:
            return
        self.problems.extend(problem for rank_problems in problems for problem in rank_problems)
        fitness = metrics.fitness if metrics is not None else 0.0
        if fitness >= progress.best_fitness:  # ties go to the later epoch (YOLOV5-FACTS.md)
            progress.best_fitness, progress.best_epoch = fitness, epoch
        device_peak = None if run.backend.device.type == "cpu" else run.backend.memory_stats().peak_bytes
        row = epoch_row(epoch, stats, metrics, backends.host_memory_stats().peak_bytes, device_peak)
        run.validation.results.add(row)
        LOGGER.info("%s", epoch_line(epoch, run.settings.epochs, row))
        with run.phases.time("saves"):
            self.save_checkpoints(run, epoch)
        run.backend.reset_peak_memory()

    @staticmethod
    def save_checkpoints(run: Run, epoch: int) -> None:
        """last.pt every epoch (only the final one with --nosave), best.pt on a new best, epoch<N>.pt by period."""
        settings, folder = run.settings, run.folder
        if settings.nosave and epoch + 1 != settings.epochs:
            return
        save_checkpoint(folder.last_path, checkpoint(run, full=True))
        weights_only = checkpoint(run, full=False)
        if run.progress.best_epoch == epoch:
            save_checkpoint(folder.best_path, weights_only)
        if settings.save_period > 0 and (epoch + 1) % settings.save_period == 0:
            save_checkpoint(folder.epoch_path(epoch + 1), weights_only)

    @staticmethod
    def save_inside_epoch(run: Run) -> None:
        """last.pt at a step boundary inside an epoch (a signal, or --save-minutes), rank 0."""
        if run.validation is not None:
            save_checkpoint(run.folder.last_path, checkpoint(run, full=True))
            LOGGER.info("saved %s at epoch %d, batch %d/%d", run.folder.last_path, run.progress.epoch + 1,
                        run.progress.batch, len(run.train_loader))

    @staticmethod
    def stopped(run: Run, epoch: int, signal_number: int | None) -> Interrupted:
        """The one line a run stopped by a signal ends with, and its exit code."""
        message = (f"stopped at epoch {epoch + 1}, batch {run.progress.batch}/{len(run.train_loader)}; resume with: "
                   f"python -m detect.train --resume {run.folder.save_dir}")
        return Interrupted(message, signal_number or signal.SIGTERM)

    @staticmethod
    def should_stop(run: Run, epoch: int) -> bool:
        """Early stopping: `patience` epochs without a better fitness (0 turns it off)."""
        patience, best_epoch = run.settings.patience, run.progress.best_epoch
        stop = bool(patience) and run.context.is_main and epoch - best_epoch >= patience
        if stop:
            LOGGER.info("stopping early: no improvement for %d epochs (best: epoch %d)", patience, best_epoch + 1)
        return stop

    def finish(self, run: Run, epochs_run: int) -> FitResult:
        """Final evaluation of the best weights, plots and the bad-file summary (rank 0)."""
        folder, context = run.folder, run.context
        # Parameters only: BatchNorm statistics are rank 0's after DDP's broadcast, then each rank's own batch.
        if context.distributed and not replicas_in_sync(context, run.model.parameters()):
            LOGGER.warning("the %d ranks ended with different parameters", context.world_size)
        elif context.distributed:
            LOGGER.info("all %d ranks hold identical parameters", context.world_size)
        if run.validation is None:
            return FitResult(folder.save_dir, None, None, None, epochs_run)
        if not run.settings.noplots:
            with run.phases.time("plots"):
                run.validation.results.plot()
        run.validation.results.close()
        best = folder.best_path if folder.best_path.is_file() else None
        last = folder.last_path if folder.last_path.is_file() else None
        weights = best or last
        metrics = None
        if weights is not None:
            with run.phases.time("final evaluation"):
                metrics = evaluate_checkpoint(weights, run.validation.loader, run.validation.evaluator, run.backend,
                                              folder.save_dir, progress=run.settings.progress,
                                              plots=not run.settings.noplots)
        folder.write_problems(self.problems, run.train_loader.split)
        LOGGER.info("%s", run.phases.line())
        LOGGER.info("results saved to %s", folder.save_dir)
        return FitResult(folder.save_dir, best, last, metrics, epochs_run)


def checkpoint(run: Run, full: bool) -> dict:
    """The run's checkpoint dict; `full` adds what resuming needs (optimizer, scaler, scheduler, every RNG)."""
    ema, step = run.step.ema, run.step
    config = {"settings": run.settings.to_dict(), "hyp": dataclasses.asdict(run.hyp)}
    return build_payload(
        model=model_state(run.model), ema={**model_state(ema.module), "updates": ema.updates},
        optimizer=step.optimizer.state_dict() if full else None, scaler=step.scaler.state_dict() if full else None,
        scheduler=run.scheduler.state_dict() if full else None, rng=rng_state(run.backend) if full else None,
        progress=run.progress, config=config)
