"""Hyper-parameter evolution (`python -m detect.train --evolve N`): N short training runs, each with a hyp proposed
by an Optuna sampler over yolov5's search space (space.py), scored by the fitness of their final epoch.

The study lives in a storage (SQLite in runs/evolve/<name>/study.db by default, or any Optuna storage URL), so a
stopped evolution continues where it was, and several processes or machines can run trials of one study at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from detect.atomic_file import output_folder
from detect.errors import UserError, short_repr
from detect.evolution.evolve_files import TrialRecord, best_record, plot_evolution, write_best_hyp, write_csv
from detect.evolution.optuna_study import (
    SAMPLERS,
    build_sampler,
    check_settings,
    default_storage,
    import_optuna,
    open_storage,
    open_study,
    study_identity,
)
from detect.evolution.space import start_params
from detect.evolution.trials import drop_weights, run_trials, trial_dir, trial_records
from detect.training.settings import TrainSettings

EVOLVE_PROJECT = "runs/evolve"  # yolov5's folder for evolution; --project replaces it

__all__ = ["EVOLVE_PROJECT", "SAMPLERS", "EvolveResult", "evolve"]


@dataclasses.dataclass(frozen=True)
class EvolveResult:
    """Where a study left its files, and its best trial (None when no trial completed)."""

    folder: Path
    trials: int  # the study's trials, completed or failed
    best_trial: int | None
    best_fitness: float | None
    csv: Path
    best_hyp: Path | None  # hyp_evolve.yaml
    plot: Path


def evolve(settings: TrainSettings, trials: int, sampler: str = "tpe", storage: str | None = None) -> EvolveResult:
    """Run the study settings.project/settings.name until it holds `trials` trials, each `Trainer` run of
    settings.epochs with an Optuna-proposed hyp (the first: settings.hyp); a study that exists is continued."""
    optuna = import_optuna()
    if trials < 1:
        raise UserError(f"--evolve {trials}: give the number of trials, at least 1")
    if sampler not in SAMPLERS:
        raise UserError(f"--evolve-sampler {short_repr(sampler)}: choose {', '.join(SAMPLERS)}")
    start = check_settings(settings)
    folder = output_folder(Path(settings.project) / settings.name, "the study's folder")

    def drop_stale(trial: Any) -> None:  # a killed process's trial ends when another fails it: its weights go then
        drop_weights(trial_dir(folder, trial.number))

    with _optuna_quiet(optuna):
        study = open_study(optuna, open_storage(optuna, storage or default_storage(folder), drop_stale), settings.name,
                           build_sampler(optuna, sampler), study_identity(settings, start), start_params(start))
        run_trials(optuna, study, settings, start, folder, trials, on_trial=lambda: write_files(optuna, study, folder))
    best = write_files(optuna, study, folder)
    return EvolveResult(folder=folder, trials=len(trial_records(optuna, study)),
                        best_trial=None if best is None else best.number,
                        best_fitness=None if best is None else best.fitness, csv=folder / "evolve.csv",
                        best_hyp=None if best is None else folder / "hyp_evolve.yaml",
                        plot=plot_evolution(trial_records(optuna, study), folder / "evolve.png"))


def write_files(optuna: ModuleType, study: object, folder: Path) -> TrialRecord | None:
    """evolve.csv and hyp_evolve.yaml as the study stands (after each trial, from any process); its best trial."""
    records = trial_records(optuna, study)
    write_csv(records, folder / "evolve.csv")
    write_best_hyp(records, folder / "hyp_evolve.yaml")
    return best_record(records)

@contextlib.contextmanager
def _optuna_quiet(optuna: ModuleType) -> Iterator[None]:
    """Optuna's own line per trial only at ERROR: each trial logs one line of ours instead."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)
