"""The Trainer: epoch by epoch train, validate and end the epoch through the hooks (training/hooks.py), for a run that
build.py set up. `fit` is the table of contents."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from detect import atomic_file
from detect import backend as backends
from detect.backend.profiler import ProfileSchedule
from detect.errors import Interrupted
from detect.evaluation.evaluator import Metrics
from detect.evaluation.final import final_evaluation
from detect.evaluation.report import score_meaning
from detect.evaluation.val_loop import EvalSettings, EvaluationStopped, PassOptions, ShardPredictions, evaluate
from detect.inference.runtimes.torch_model import TorchInference
from detect.models import DetectionModel
from detect.models.weights import load_model, model_from_state, model_state
from detect.training.distributed import (
    DistContext,
    any_rank,
    broadcast_object,
    broadcast_tensors,
    collective_failure,
    destroy_process_group,
    gather_objects,
    replicas_in_sync,
)
from detect.training.epoch import EpochStats, train_one_epoch
from detect.training.hooks import Hook, HookList, SignalStop, run_hooks
from detect.training.phase_times import PhaseTimes
from detect.training.results_log import epoch_row
from detect.training.run import Run
from detect.training.settings import NEW_RUN, Resume, TrainSettings
from detect.training.setup.build import build_run
from detect.training.setup.recipe import resolve_run

LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FitResult:
    """Where a finished run left its files, and the final evaluation of its best weights (main rank only)."""

    save_dir: Path
    best: Path | None
    last: Path | None
    metrics: Metrics | None
    epochs_run: int


@dataclasses.dataclass(frozen=True)
class JobExchange:
    """The ranks of a torchrun job sharing a validation pass (evaluation.val_loop.RankExchange): flags agreed by an
    all-reduce on the backend's device, the shards gathered to the main rank."""

    context: DistContext
    device: torch.device

    @classmethod
    def of(cls, context: DistContext, device: torch.device) -> JobExchange | None:
        """The exchange of a job; None in one process, which has nothing to share."""
        return cls(context, device) if context.distributed else None

    def any_stopped(self, stopped: bool) -> bool:
        flags = torch.tensor([stopped], device=self.device)
        return bool(any_rank(self.context, flags, "the all-reduce that ends a validation pass")[0])

    def gather(self, shard: ShardPredictions) -> list[ShardPredictions] | None:
        shards = gather_objects(self.context, shard)
        return shards if self.context.is_main else None


class Trainer:
    """One training run; every rank builds one, the main rank alone evaluates and writes."""

    def __init__(self, settings: TrainSettings, context: DistContext | None = None, resume: Resume = NEW_RUN,
                 resume_overrides: dict[str, Any] | None = None, profile: ProfileSchedule | None = None,
                 callbacks: Sequence[Hook] = ()) -> None:
        """resume: a new run, the newest <project>/*/weights/last.pt or a run folder or checkpoint path; a resumed
        run takes its stored settings, with `resume_overrides` (e.g. device, workers) replacing some. profile: record
        these steps of this process's first epoch (--profile). callbacks: your hooks, called after the trainer's own."""
        self.settings, self.context = settings, context or DistContext.from_env()
        self.resume, self.resume_overrides = resume, resume_overrides
        self.profile, self.callbacks = profile, tuple(callbacks)
        self.problems: list[str] = []

    @atomic_file.command()  # what a run reads (data, --weights, its best.pt) is its sources until it ends
    def fit(self) -> FitResult:
        """Train the run's epochs (from where a resumed run stopped); returns where the results are. SIGTERM and
        Ctrl-C are handled from the start: during the set-up they end it at once, then at the next step boundary or
        validation batch (SignalStop)."""
        signals = SignalStop()
        with signals.handling():
            phases = PhaseTimes()
            run = build_run(resolve_run(self.settings, self.context, self.resume, self.resume_overrides), phases)
            hooks = run_hooks(run, self.profile, self.callbacks, signals)
            first_epoch, result = run.counters.epoch, None
            try:
                hooks.before_train()
                self.train_epochs(run, hooks)
                result = self.finish(run, run.counters.epoch - first_epoch)
            except RuntimeError as error:  # a collective that timed out or lost its peers: one line, not a traceback
                failure = collective_failure(run.context, error, run.loop.collective_timeout)
                if failure is None:
                    raise
                raise failure from None
            finally:
                hooks.after_train(result.metrics if result else None)
                destroy_process_group(run.context)
        if run.context.is_main:
            LOGGER.info("%s", run.phases.line())
            LOGGER.info("results saved to %s", run.folder.save_dir)
            if result is not None and result.metrics is not None:
                LOGGER.info("%s", self.next_steps(run, result))
        return result

    @staticmethod
    def next_steps(run: Run, result: FitResult) -> str:
        """The run's last lines: what its weights scored, on which data and at which size, what that means, and the
        commands that take them on (each at the size the weights record, so none needs --imgsz)."""
        trained, metrics, weights = run.loop.trained, result.metrics, result.best or result.last
        slicing = run.validation.slicing
        sliced = f" --slice {slicing.size}" if slicing is not None else ""
        images = Path(os.fsdecode(run.validation.loader.records.paths[0])).parent
        scored = (f"{weights.name} scored mAP@0.5 {metrics.map50:.3f} (mAP@0.5:0.95 {metrics.map50_95:.3f}) on the "
                  f"val split of {trained.data} at {trained.imgsz} px: {score_meaning(metrics.map50)}. Next:")
        return "\n".join([
            scored,
            f"  python -m detect.val --weights {weights} --data {trained.data}{sliced}   # the scores again",
            f"  python -m detect.predict --weights {weights} --source {images}{sliced}   # boxes drawn: runs/predict",
            f'  python -m detect.export --weights {weights} --include onnx   # pip install -e ".[export]" first'])

    def train_epochs(self, run: Run, hooks: HookList) -> None:
        """Epoch by epoch: train, validate, end the epoch (counters, schedule, hooks), until the last epoch or an early
        stop. A signal stops at the next step boundary, or at the next batch of the validation, with last.pt written
        (Interrupted); one that came in the epoch's last validation batch or its end stops once the epoch is saved."""
        for epoch in range(run.counters.epoch, run.loop.epochs):
            hooks.before_epoch(epoch)
            with run.phases.time("training"):
                stats = train_one_epoch(run.parts, run.train_loader, run.plan, run.counters, hooks,
                                        show_progress=run.context.is_main and run.loop.progress)
            if stats.stopped:
                raise self.stopped(run, f"at epoch {epoch + 1}, batch {run.counters.batch}/{len(run.train_loader)}")
            with run.phases.time("validation"):
                metrics = self.validate(run, epoch)
            # Ended only once validated: a run stopped in validation resumes at its last batch and validates it.
            run.counters.end_epoch()
            run.scheduler.step()
            hooks.after_epoch(epoch, self.end_epoch(run, epoch, stats, metrics))
            run.backend.reset_peak_memory()
            end_training, stop = any_rank(run.context, torch.tensor(
                [run.control.end_training, run.control.stop_asked()], device=run.backend.device),
                "the all-reduce that ends an epoch").tolist()
            if end_training:
                return
            if stop and epoch + 1 < run.loop.epochs:  # (after the last epoch the final evaluation stops)
                raise self.stopped_after_epoch(run, epoch)

    def validate(self, run: Run, epoch: int) -> Metrics | None:
        """COCO metrics of the EMA weights (every epoch, or only the last with --noval): each rank predicts its shard
        of the val batches, the main rank scores them all (None elsewhere). A stop asked meanwhile ends the pass at the
        next batch, with last.pt written at the epoch's last batch (Interrupted)."""
        validation, context = run.validation, run.context
        if not run.loop.validate_each_epoch and epoch + 1 != run.loop.epochs:
            return None
        broadcast_tensors(context, validation.model.state_dict().values())  # the main rank's EMA weights
        if validation.evaluator is not None:
            validation.evaluator.reset()
        try:
            with run.backend.validation_autocast():  # fp16 on accelerators with AMP, as yolov5 validates in training
                options = PassOptions(run.loop.progress and context.is_main,
                                      exchange=JobExchange.of(context, run.backend.device), stop=run.control.stop_asked)
                result = evaluate(validation.predict(run.backend), validation.loader, run.backend,
                                  validation.evaluator, EvalSettings(), options)
        except EvaluationStopped:
            if context.is_main:
                run.save_last()  # the epoch's last batch: a resume validates the epoch and goes on
            raise self.stopped(run, f"in epoch {epoch + 1}'s validation") from None
        if result is None:
            return None
        self.problems.extend(result.problems)
        return result.metrics

    def end_epoch(self, run: Run, epoch: int, stats: EpochStats, metrics: Metrics | None) -> dict[str, float]:
        """Gather the ranks' problems and, on the main rank, count a new best; the epoch's results.csv row."""
        problems = gather_objects(run.context, stats.problems)
        self.problems.extend(problem for rank_problems in problems for problem in rank_problems)
        counters = run.counters
        fitness = metrics.fitness if metrics is not None else 0.0
        # ties go to the later epoch (docs/yolov5.md, "Validation during training")
        if run.context.is_main and fitness >= counters.best_fitness:
            counters.best_fitness, counters.best_epoch = fitness, epoch
        device_peak = None if run.backend.device.type == "cpu" else run.backend.memory_stats().peak_bytes
        return epoch_row(epoch, stats, metrics, backends.host_memory_stats().peak_bytes, device_peak)

    def stopped_after_epoch(self, run: Run, epoch: int) -> Interrupted:
        """The end of a run whose stop came after the epoch's last validation batch, as soon as the epoch is saved:
        going on to the next epoch's loader start, first step and save would spend the few seconds a stop has
        (docs/scale.md, "Many nodes and preemption")."""
        if run.context.is_main and not run.loop.save_each_epoch:  # last.pt is otherwise written at the last epoch alone
            run.save_last()
        return self.stopped(run, f"after epoch {epoch + 1}")

    @staticmethod
    def stopped(run: Run, where: str) -> Interrupted:
        """The one line a run stopped with last.pt written ends with (printed by the main rank alone), and its exit
        code."""
        message = (f"stopped {where}; resume with: python -m detect.train --resume {run.folder.save_dir}"
                   if run.context.is_main else "")
        return Interrupted(message, run.control.stop_signal or signal.SIGTERM)

    def finish(self, run: Run, epochs_run: int) -> FitResult:
        """Final evaluation of the best weights on every rank's shard, and the bad-file summary (main rank)."""
        folder, context = run.folder, run.context
        # Parameters only: BatchNorm statistics are rank 0's after DDP's broadcast, then each rank's own batch.
        projectors = () if run.parts.distill is None else run.parts.distill.projectors.parameters()
        if context.distributed and not replicas_in_sync(context, itertools.chain(run.model.parameters(), projectors)):
            LOGGER.warning("the %d ranks ended with different parameters", context.world_size)
        elif context.distributed:
            LOGGER.info("all %d ranks hold identical parameters", context.world_size)
        best = folder.best_path if folder.best_path.is_file() else None
        last = folder.last_path if folder.last_path.is_file() else None
        weights = self.final_weights(run, best or last)
        metrics = None
        if weights is not None:
            with run.phases.time("final evaluation"):
                metrics = self.final_evaluation(run, *weights)
        if not context.is_main:
            return FitResult(folder.save_dir, None, None, None, epochs_run)
        folder.write_problems(self.problems, run.train_loader.split)
        return FitResult(folder.save_dir, best, last, metrics, epochs_run)

    @staticmethod
    def final_evaluation(run: Run, model: DetectionModel, weights: Path) -> Metrics | None:
        """The final evaluation of `weights` on every rank's shard (the main rank's metrics); a stop asked meanwhile
        ends it at the next batch (Interrupted: the training is done and saved)."""
        context, loop = run.context, run.loop
        try:
            options = PassOptions(loop.progress and context.is_main,
                                  exchange=JobExchange.of(context, run.backend.device), stop=run.control.stop_asked)
            predict = run.validation.predict(run.backend, TorchInference(model, run.backend))
            return final_evaluation(predict, weights, run.validation.loader, run.validation.evaluator, run.backend,
                                    run.folder.save_dir, loop.plots, options)
        except EvaluationStopped:
            message = (f"stopped in the final evaluation; the {loop.epochs} epochs are trained and saved: score "
                       f"them with python -m detect.val --weights {weights} --data {loop.trained.data} --imgsz "
                       f"{loop.trained.imgsz}") if context.is_main else ""
            raise Interrupted(message, run.control.stop_signal or signal.SIGTERM) from None

    @staticmethod
    def final_weights(run: Run, path: Path | None) -> tuple[DetectionModel, Path] | None:
        """The model of the main rank's `path` (best.pt, else last.pt) on every rank: the main rank reads the file,
        the others get its tensors (their disks need not hold the run folder)."""
        context = run.context
        path = broadcast_object(context, str(path) if path is not None and context.is_main else None)
        if path is None:
            return None
        model = load_model(path, refuse_nonfinite=False) if context.is_main else None  # a diverged run is scored too
        if context.distributed:
            state = broadcast_object(context, model_state(model) if context.is_main else None)
            model = model or model_from_state(state, path, refuse_nonfinite=False).float().eval()
        return model, Path(path)
