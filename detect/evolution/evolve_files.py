"""The study's files, yolov5's names: evolve.csv (one row per trial), hyp_evolve.yaml (the best hyp), evolve.png."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from detect.atomic_file import write_text
from detect.config import Hyp
from detect.evolution.space import SEARCHED, SPACE

# The metric columns of evolve.csv, named as in a run's results.csv.
METRIC_COLUMNS = ("metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95")
HYP_KEYS = tuple(field.name for field in dataclasses.fields(Hyp))


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One finished trial as the outputs show it; `fitness` None means it failed (`error` says why)."""

    number: int
    hyp: dict[str, Any]
    seconds: float
    fitness: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # METRIC_COLUMNS -> value
    worker: str = ""  # host:pid of the process that ran it
    error: str = ""


def best_record(records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The completed trial of highest fitness (the earliest on a tie), or None when none completed."""
    complete = [record for record in records if record.fitness is not None]
    return max(complete, key=lambda record: (record.fitness, -record.number)) if complete else None


def _replace_text(path: Path, text: str) -> Path:
    """Write `text` to `path` through a temporary file, so a reader (or another process) never sees half."""
    return write_text(path, text)


def write_csv(records: Sequence[TrialRecord], path: Path) -> Path:
    """evolve.csv: trial, state, fitness, the metrics, seconds, worker, every hyp key, error; one row per trial."""
    columns = ("trial", "state", "fitness", *METRIC_COLUMNS, "seconds", "worker", *HYP_KEYS, "error")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns)
    writer.writeheader()
    for record in sorted(records, key=lambda record: record.number):
        writer.writerow({"trial": record.number, "state": "failed" if record.fitness is None else "complete",
                         "fitness": record.fitness, **record.metrics, "seconds": round(record.seconds, 2),
                         "worker": record.worker,
                         **{key: record.hyp.get(key) for key in HYP_KEYS}, "error": record.error})
    return _replace_text(path, buffer.getvalue())


def write_best_hyp(records: Sequence[TrialRecord], path: Path) -> Path | None:
    """hyp_evolve.yaml: the best trial's hyp, every key, a valid --hyp file; None while no trial completed."""
    best = best_record(records)
    if best is None:
        return None
    header = (f"# hyp_evolve.yaml: the best of {len(records)} trials, trial {best.number}, fitness {best.fitness:.5f}"
              f" (0.1 mAP@0.5 + 0.9 mAP@0.5:0.95); every trial is in evolve.csv\n")
    body = yaml.safe_dump({key: best.hyp[key] for key in HYP_KEYS}, sort_keys=False)
    return _replace_text(path, header + body)


def plot_evolution(records: Sequence[TrialRecord], path: Path) -> Path:
    """evolve.png: the evolution figure."""
    from detect.evaluation.metric_plots import save_figure

    return save_figure(evolution_figure(records), path)


def evolution_figure(records: Sequence[TrialRecord]) -> Any:
    """Fitness against each searched hyp value, one panel per key (in SEARCHED order), the best trial marked."""
    from matplotlib.figure import Figure

    complete = [record for record in records if record.fitness is not None]
    best = best_record(records)
    columns = 5
    rows = math.ceil(len(SEARCHED) / columns)
    figure = Figure(figsize=(3 * columns, 2.6 * rows), tight_layout=True)
    fitness = [record.fitness for record in complete]
    axes = figure.subplots(rows, columns).ravel()
    for axis in axes[len(SEARCHED):]:
        axis.set_axis_off()
    for index, (axis, key) in enumerate(zip(axes, SEARCHED)):
        axis.scatter([record.hyp[key] for record in complete], fitness, c=range(len(complete)), cmap="viridis",
                     s=12, alpha=0.8)  # colour: trial order, so drift over the study shows
        if best is not None:
            axis.plot(best.hyp[key], best.fitness, "r+", markersize=14)
            axis.set_title(f"{key} = {best.hyp[key]:.3g}", fontsize=9)
        set_ticks(axis, [record.hyp[key] for record in complete], SPACE[key].log)
        if index % columns == 0:
            axis.set_ylabel("fitness", fontsize=8)
        axis.tick_params(labelsize=7)
    return figure


def set_ticks(axis: Any, values: Sequence[float], log: bool) -> None:
    """At most about five x labels in a panel, written plainly (0.002, 0.01). In a 3-inch panel matplotlib's own
    ran together: on a log axis it labels minor ticks too (2x10^-3, 3x10^-3, ...) when the values span a decade."""
    from matplotlib import ticker

    if not log:
        axis.xaxis.set_major_locator(ticker.MaxNLocator(nbins=4))
        return
    axis.set_xscale("log")  # before the locators: it resets them
    positive = [value for value in values if value > 0]
    decades = math.log10(max(positive) / min(positive)) if positive else 0.0
    # Over two decades the powers of ten, over one also 2 and 5 times them, within one evenly spaced values.
    if decades >= 1:
        locator = ticker.LogLocator(subs=(1.0,) if decades >= 2 else (1.0, 2.0, 5.0))
    else:
        locator = ticker.MaxNLocator(nbins=4)
    axis.xaxis.set_major_locator(locator)
    axis.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(ticker.NullFormatter())
