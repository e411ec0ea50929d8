"""The trials of a study: each one a short training run of its own hyp, until the study holds its number of trials.

Several processes may run trials of one study at once. A trial counts once it completed or failed (a diverged or
broken run). A trial cut short (Ctrl-C, SIGTERM, a killed process) does not count: its hyp is queued again, so the
study still ends with exactly the asked number, none run twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from detect.atomic_file import make_folder, remove_file, remove_folder, write_text
from detect.config import Hyp
from detect.errors import Interrupted, UserError, one_line
from detect.evolution.evolve_files import METRIC_COLUMNS, TrialRecord
from detect.evolution.space import suggest_hyp
from detect.training.settings import TrainSettings
from detect.training.trainer import Trainer

LOGGER = logging.getLogger(__name__)
POLL_SECONDS = 2  # how often a process whose study's last trials run elsewhere looks again


def counts(trial: Any, complete: Any, fail: Any) -> bool:
    """Whether a stored trial is one of the study's trials: completed, or failed by its run (not cut short)."""
    return trial.state == complete or trial.state == fail and "error" in trial.user_attrs


def run_trials(optuna: ModuleType, study: Any, settings: TrainSettings, start: Hyp, folder: Path, total: int,
               on_trial: Callable[[], None]) -> None:
    """Run trials until `total` count in the study, waiting for the last ones when other processes hold them;
    `on_trial` after each trial of this process."""
    states = optuna.trial.TrialState
    objective = Objective(optuna, study, settings, start, folder, total)
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # a dead process's trial: failed, its hyp queued again
        stored = study.get_trials(deepcopy=False)
        done = sum(counts(trial, states.COMPLETE, states.FAIL) for trial in stored)
        running = sum(trial.state == states.RUNNING for trial in stored)
        if done >= total:
            return
        if done + running >= total:
            time.sleep(POLL_SECONDS)
            continue
        study.optimize(objective, n_trials=1)
        on_trial()


@dataclasses.dataclass
class Objective:
    """One trial: claim a place among the `total`, train with the proposed hyp, score the fitness (or fail)."""

    optuna: ModuleType
    study: Any
    settings: TrainSettings
    start: Hyp
    folder: Path
    total: int

    def __call__(self, trial: Any) -> float:
        # Optuna's first heartbeat comes from a thread started beside this call: a process killed before it beat
        # left a RUNNING trial that never went stale, and every other process of the study waited for it forever.
        self.study._storage.record_heartbeat(trial._trial_id)
        self._claim(trial)
        hyp = suggest_hyp(trial, self.start)
        run_dir = trial_dir(self.folder, trial.number)
        make_folder(run_dir)
        hyp_path = write_text(run_dir / "hyp.yaml", yaml.safe_dump(dataclasses.asdict(hyp), sort_keys=False))
        trial.set_user_attr("hyp", dataclasses.asdict(hyp))
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # which process of the study ran it
        began = time.monotonic()
        try:
            fitness = self._train(hyp_path, run_dir.name, trial)
        except KeyboardInterrupt:
            self.study.enqueue_trial(trial.params)  # cut short: the same hyp runs again on a restart
            raise
        except Interrupted as stopped:  # a signal stopped the run (the Trainer saved it): the study stops too
            signal_number = stopped.exit_code - 128
        except Exception as error:  # noqa: BLE001 (a diverged or broken run fails this trial; the study goes on)
            trial.set_user_attr("seconds", time.monotonic() - began)
            trial.set_user_attr("error", one_line(error))
            LOGGER.warning("evolve trial %d failed in %.1f s: %s", trial.number, time.monotonic() - began,
                           one_line(error))
            return math.nan  # Optuna stores a NaN objective as a FAIL trial
        else:
            trial.set_user_attr("seconds", time.monotonic() - began)
            LOGGER.info("evolve trial %d: fitness %.5f in %.1f s (%s)", trial.number, fitness,
                        time.monotonic() - began, hyp_path)
            return fitness
        # Raised outside the handler, so that it does not carry the stopped run's frames (and loader workers) along.
        self.study.enqueue_trial(trial.params)
        raise Interrupted(f"evolve stopped during trial {trial.number}; the same command continues the study in "
                          f"{self.folder}", signal_number)

    def _claim(self, trial: Any) -> None:
        """Prune this trial when `total` others already count or started before it (another process won the race);
        a queued hyp it took is queued again."""
        states = self.optuna.trial.TrialState
        stored = self.study.get_trials(deepcopy=False)
        held = sum(counts(other, states.COMPLETE, states.FAIL)
                   or other.state == states.RUNNING and other.number < trial.number
                   for other in stored if other.number != trial.number)
        if held < self.total:
            return
        queued = next(other for other in stored if other.number == trial.number).system_attrs.get("fixed_params")
        if queued:
            self.study.enqueue_trial(queued)
        raise self.optuna.TrialPruned(f"the study's {self.total} trials are taken")

    def _train(self, hyp_path: Path, name: str, trial: Any) -> float:
        """Fitness of a short run with validation at the end only (yolov5's evolve: noval, nosave)."""
        settings = dataclasses.replace(self.settings, hyp=str(hyp_path), project=str(self.folder), name=name,
                                       exist_ok=True, noval=True, nosave=True)
        try:
            metrics = Trainer(settings).fit().metrics
        finally:
            drop_weights(self.folder / name)
        if metrics is None or not math.isfinite(metrics.fitness):
            raise UserError("the run ended without a finite fitness")
        values = (metrics.precision, metrics.recall, metrics.map50, metrics.map50_95)
        trial.set_user_attr("metrics", dict(zip(METRIC_COLUMNS, map(float, values))))
        return float(metrics.fitness)


def trial_dir(folder: Path, number: int) -> Path:
    """The folder of trial `number` of the study in `folder`: its hyp.yaml and its run."""
    return folder / f"trial{number}"


def drop_weights(run_dir: Path) -> None:
    """Delete a trial's checkpoints, however its run ended. The Trainer writes last.pt and best.pt even with nosave
    (its final evaluation reads best.pt; a stopped run saves last.pt), 36 MB a trial for yolov5n; a trial yields
    its fitness, and one cut short runs again from the start, so nothing reads them after the run."""
    for checkpoint in run_dir.rglob("*.pt"):
        remove_file(checkpoint)
    with contextlib.suppress(OSError):  # the weights folder, unless something else is in it
        remove_folder(run_dir / "weights")


def trial_records(optuna: ModuleType, study: Any) -> list[TrialRecord]:
    """The study's counted trials, in trial order, as the outputs show them."""
    states = optuna.trial.TrialState
    return [TrialRecord(number=trial.number, hyp=trial.user_attrs["hyp"], seconds=trial.user_attrs.get("seconds", 0.0),
                        fitness=trial.value if trial.state == states.COMPLETE else None,
                        metrics=trial.user_attrs.get("metrics", {}), worker=trial.user_attrs.get("worker", ""),
                        error=trial.user_attrs.get("error", ""))
            for trial in study.get_trials(deepcopy=False) if counts(trial, states.COMPLETE, states.FAIL)]
