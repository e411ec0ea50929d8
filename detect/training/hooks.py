"""The hook points of a training run, the public callback API (`train.run(..., callbacks=[MyHook()])`), and the
trainer's own hooks: the signal stop, a teacher's lines (what it teaches, what it costs), the timed mid-epoch save,
first-batch plots, the profiler, the results log, checkpoints and early stopping.

The trainer calls, in this order: before_train; for each epoch before_epoch, then for each step before_step and
after_step, then after_epoch (after validation, with the epoch's results.csv row); after_train once the run ends
(also when it fails or a signal stops it: then `metrics` is None). Hooks ask through `run.control` (control.Control:
stop, save, end the run); the loop answers in the events: after_step's `step` (control.StepEnd) says when the ranks
stopped at a boundary to save or to stop. Only the signal stop and the teacher's lines (every rank times its step at
once) run on every rank; the other hooks, yours included, run on the rank that writes the run (run.context.is_main)."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Sequence

from detect.atomic_file import make_folder
from detect.backend.profiler import ProfileSchedule, find_trace, format_summary, summarize
from detect.data import Batch
from detect.data.dataset_plots import plot_batch
from detect.errors import Interrupted, UserError
from detect.evaluation.evaluator import Metrics
from detect.models.safe_io import save_checkpoint
from detect.training.control import Control, StepEnd
from detect.training.distill.cost import time_teacher
from detect.training.distributed import stop_signals_handled_by
from detect.training.results_log import epoch_line
from detect.training.run import Run

LOGGER = logging.getLogger(__name__)


class Hook:
    """Override any of these; each gets the run (training/run.py Run: settings, loop, folder, model, control, ...)."""

    def before_train(self, run: Run) -> None:
        """Once, after the run is set up (a resumed run: restored), before its first step."""

    def before_epoch(self, run: Run, epoch: int) -> None:
        """Before the epoch's first step (epoch counts from 0)."""

    def before_step(self, run: Run, index: int, batch: Batch) -> None:
        """Before the forward pass on batch `index` of the epoch (as the loader gave it, on the host)."""

    def after_step(self, run: Run, index: int, step: StepEnd) -> None:
        """After the step on batch `index`; `step.save_now` says the ranks stopped at a boundary to save (and
        `step.stopped` that a stop ends the epoch there)."""

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        """After the epoch's validation; `row` is its results.csv row (column -> value; no metrics without
        validation)."""

    def after_train(self, run: Run, metrics: Metrics | None) -> None:
        """Once, when the run ends: `metrics` of the final evaluation, None if there was none (a failed or stopped
        run, --nosave with no weights)."""


class HookList:
    """The run's hooks, called in list order at each point (what the epoch loop sees as its StepHooks)."""

    def __init__(self, run: Run, hooks: Sequence[Hook]) -> None:
        self.run, self.hooks = run, tuple(hooks)

    @property
    def control(self) -> Control:
        """What the hooks ask of the loop: the run's control."""
        return self.run.control

    def before_train(self) -> None:
        for hook in self.hooks:
            hook.before_train(self.run)

    def before_epoch(self, epoch: int) -> None:
        for hook in self.hooks:
            hook.before_epoch(self.run, epoch)

    def before_step(self, index: int, batch: Batch) -> None:
        for hook in self.hooks:
            hook.before_step(self.run, index, batch)

    def after_step(self, index: int, step: StepEnd) -> None:
        for hook in self.hooks:
            hook.after_step(self.run, index, step)
        if step.save_now:  # answered: every save asked before this boundary is written
            self.run.control.save_asked = False

    def after_epoch(self, epoch: int, row: dict[str, float]) -> None:
        for hook in self.hooks:
            hook.after_epoch(self.run, epoch, row)

    def after_train(self, metrics: Metrics | None) -> None:
        for hook in self.hooks:
            hook.after_train(self.run, metrics)


class SignalStop(Hook):
    """SIGTERM (what a scheduler or a cloud sends before it takes the machine, and torchrun to every process of its
    job) and SIGINT (Ctrl-C): during the run's set-up they end it at once (Interrupted); once it trains, they ask
    every rank to stop at the next step boundary or validation batch, where last.pt is written. A second Ctrl-C ends
    at once (a checkpoint being written stays whole: it is renamed into place). Handlers are Python's main-thread
    business: elsewhere nothing is caught."""

    def __init__(self) -> None:
        self.control: Control | None = None

    def handling(self) -> contextlib.AbstractContextManager[None]:
        """The handlers in place for the body (the whole run: set-up, training, final evaluation), then the old ones."""
        return stop_signals_handled_by(self.receive)

    def before_train(self, run: Run) -> None:
        self.control = run.control

    def receive(self, number: int, _frame: object = None) -> None:
        name = signal.Signals(number).name
        if self.control is None:  # the set-up (label check, caches, model) holds nothing a resume needs
            raise Interrupted(f"{name} during the run's set-up: stopped before the first step (nothing saved)", number)
        if self.control.stop_signal is None:
            self.control.stop_signal = number
            LOGGER.warning("%s: stopping at the next step boundary or validation batch (Ctrl-C again to end at once)",
                           name)
        signal.signal(signal.SIGINT, signal.default_int_handler)


class TimedSave(Hook):
    """--save-minutes: ask for a mid-epoch last.pt every period (the main rank's clock decides for the job)."""

    def __init__(self, minutes: float) -> None:
        self.period = minutes * 60
        self.next_save = time.monotonic() + self.period

    def before_train(self, run: Run) -> None:
        self.next_save = time.monotonic() + self.period

    def before_step(self, run: Run, index: int, batch: Batch) -> None:
        if time.monotonic() >= self.next_save:
            run.control.save_asked = True

    def after_step(self, run: Run, index: int, step: StepEnd) -> None:
        if step.save_now:
            self.next_save = time.monotonic() + self.period


class FirstBatchPlots(Hook):
    """train_batch0..2.jpg in this process's first epoch: what the network sees after augmentation."""

    def before_train(self, run: Run) -> None:
        self.first_epoch = run.counters.epoch

    def before_step(self, run: Run, index: int, batch: Batch) -> None:
        if run.counters.epoch == self.first_epoch and index < 3:
            plot_batch(batch, run.train_loader.names, run.folder.save_dir / f"train_batch{index}.jpg")


class Profiler(Hook):
    """--profile: this process's first epoch under the backend's profiler, a step per batch; it ends with the epoch's
    last step, so validation stays out of the trace, and its summary is logged. Under torchrun the main rank's alone:
    the other ranks run the same steps unprofiled."""

    def __init__(self, schedule: ProfileSchedule) -> None:
        self.schedule, self.profiler, self.stack = schedule, None, contextlib.ExitStack()

    def before_train(self, run: Run) -> None:
        self.profiler = self.stack.enter_context(run.backend.profiler(make_folder(self.folder(run)), self.schedule))

    def before_step(self, run: Run, index: int, batch: Batch) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def after_step(self, run: Run, index: int, step: StepEnd) -> None:
        if self.profiler is not None and (index + 1 == len(run.train_loader) or step.stopped):
            self.close(run)
            try:
                LOGGER.info("%s", format_summary(summarize(find_trace(self.folder(run)))))
            except UserError as error:  # a first epoch shorter than the schedule records nothing; training goes on
                LOGGER.warning("--profile: %s (the schedule needs %d)", error, self.schedule.steps)

    def after_train(self, run: Run, metrics: Metrics | None) -> None:
        self.close(run)

    def close(self, run: Run) -> None:
        self.stack.close()
        self.profiler = None

    @staticmethod
    def folder(run: Run):
        return run.folder.save_dir / "profile"


class ResultsLogger(Hook):
    """One results.csv row (and TensorBoard scalars) and one log line per epoch; results.png at the end, unless a stop
    ends the run: drawing it would spend much of the few seconds a stop has (docs/scale.md, "Many nodes and
    preemption"); the resumed run draws it, or plot_results from results.csv."""

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        run.results.add(row)
        LOGGER.info("%s", epoch_line(epoch, run.loop.epochs, row))

    def after_train(self, run: Run, metrics: Metrics | None) -> None:
        if run.loop.plots and not run.control.stop_asked():
            with run.phases.time("plots"):
                run.results.plot()
        run.results.close()


class Checkpointer(Hook):
    """last.pt every epoch (only the final one with --nosave) and at the step boundaries a stop or a timed save asks
    for; best.pt on a new best; epoch<N>.pt every --save-period epochs."""

    def after_step(self, run: Run, index: int, step: StepEnd) -> None:
        if step.save_now:
            run.save_last()
            LOGGER.info("saved %s at epoch %d, batch %d/%d", run.folder.last_path, run.counters.epoch + 1,
                        run.counters.batch, len(run.train_loader))

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        loop, folder = run.loop, run.folder
        if not loop.save_each_epoch and epoch + 1 != loop.epochs:
            return
        with run.phases.time("saves"):
            run.save_last()
            weights_only = run.checkpoint(full=False).to_payload()
            if run.counters.best_epoch == epoch:
                save_checkpoint(folder.best_path, weights_only)
            if loop.save_period > 0 and (epoch + 1) % loop.save_period == 0:
                save_checkpoint(folder.epoch_path(epoch + 1), weights_only)


class EarlyStopping(Hook):
    """--patience: end the run after that many epochs without a better fitness (0 turns it off)."""

    def after_epoch(self, run: Run, epoch: int, row: dict[str, float]) -> None:
        if self.should_stop(run, epoch):
            run.control.end_training = True

    @staticmethod
    def should_stop(run: Run, epoch: int) -> bool:
        patience, best_epoch = run.loop.patience, run.counters.best_epoch
        stop = bool(patience) and epoch - best_epoch >= patience
        if stop:
            LOGGER.info("stopping early: no improvement for %d epochs (best: epoch %d)", patience, best_epoch + 1)
        return stop


class TeacherLines(Hook):
    """A run with a teacher says before its first step what the teacher teaches, and what it costs a step (timed on
    every rank at once, so that copies of a --sync-bn model find their peers; the main rank speaks)."""

    def before_train(self, run: Run) -> None:
        LOGGER.info("%s", run.parts.distill.describe(run.loop.epochs))
        cost = time_teacher(run.parts, run.loop.rank_batch, run.loop.trained.imgsz)
        LOGGER.info("distillation's cost: %s", cost)


def run_hooks(run: Run, profile: ProfileSchedule | None, callbacks: Sequence[Hook], signals: SignalStop) -> HookList:
    """The run's hooks on this rank, in calling order: the trainer's own (`signals` already handling), then the
    user's callbacks."""
    hooks: list[Hook] = [signals, *([TeacherLines()] if run.parts.distill is not None else [])]
    if run.context.is_main:
        loop = run.loop
        hooks += [FirstBatchPlots()] if loop.plots else []
        hooks += [Profiler(profile)] if profile is not None else []
        hooks += [TimedSave(loop.save_minutes)] if loop.save_minutes > 0 else []
        hooks += [ResultsLogger(), Checkpointer(), EarlyStopping(), *callbacks]
    return HookList(run, hooks)

