"""evolve.csv, hyp_evolve.yaml and evolve.png from trial records."""

from __future__ import annotations

import csv
import dataclasses
import itertools

import cv2
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from detect.config import load_hyp
from detect.evolution.evolve_files import (
    HYP_KEYS,
    TrialRecord,
    best_record,
    evolution_figure,
    plot_evolution,
    write_best_hyp,
    write_csv,
)
from detect.evolution.space import SEARCHED


def _records() -> list[TrialRecord]:
    start = dataclasses.asdict(load_hyp("scratch-low.yaml"))
    metrics = {"metrics/precision": 0.5, "metrics/recall": 0.4, "metrics/mAP_0.5": 0.3, "metrics/mAP_0.5:0.95": 0.2}
    return [TrialRecord(0, start, 3.0, 0.21, metrics, "host:1"),
            TrialRecord(2, {**start, "lr0": 0.02}, 2.0, error="UserError: the loss was not finite for 10 steps"),
            TrialRecord(1, {**start, "lr0": 0.005}, 2.5, 0.25, metrics, "host:2")]


def test_csv_has_one_row_per_trial_in_order_with_every_hyp(tmp_path):
    path = write_csv(_records(), tmp_path / "evolve.csv")
    with open(path) as handle:
        rows = list(csv.DictReader(handle))
    assert [row["trial"] for row in rows] == ["0", "1", "2"]
    assert [row["state"] for row in rows] == ["complete", "complete", "failed"]
    assert rows[2]["fitness"] == "" and "not finite" in rows[2]["error"]
    assert all(key in rows[0] for key in HYP_KEYS) and float(rows[1]["lr0"]) == 0.005
    assert not list(tmp_path.glob(".*.tmp"))


def test_best_hyp_is_the_fittest_complete_trial_and_a_valid_hyp_file(tmp_path):
    records = _records()
    assert best_record(records).number == 1
    assert load_hyp(write_best_hyp(records, tmp_path / "hyp_evolve.yaml")).lr0 == 0.005
    assert write_best_hyp(records[1:2], tmp_path / "none.yaml") is None  # nothing completed yet


def test_plot_is_written_with_and_without_completed_trials(tmp_path):
    full = cv2.imread(str(plot_evolution(_records(), tmp_path / "evolve.png")))
    empty = cv2.imread(str(plot_evolution(_records()[1:2], tmp_path / "empty.png")))
    assert full is not None and empty is not None and full.std() > 1  # real images with something drawn
    assert full.shape == empty.shape and not np.array_equal(full, empty)  # the completed trials are plotted



def drawn_labels(axis) -> list:
    """The x tick labels a drawn panel shows: with text, inside its limits."""
    low, high = axis.get_xlim()
    return [label for label in axis.xaxis.get_ticklabels(which="both")
            if label.get_text() and low <= label.get_position()[0] <= high]


@pytest.mark.parametrize("low, high", [(0.003, 0.05), (1e-5, 0.1), (0.009, 0.012)])
def test_every_panel_has_a_few_tick_labels_that_do_not_run_together(low, high):
    # lr0's log axis: matplotlib's default labelled minor ticks too (2x10^-3, 3x10^-3, ...), which ran together.
    start = dataclasses.asdict(load_hyp("scratch-low.yaml"))
    records = [TrialRecord(index, {**start, "lr0": float(lr0), "hsv_h": 0.015 + index * 1e-5}, 1.0, index / 12)
               for index, lr0 in enumerate(np.geomspace(low, high, 12))]
    figure = evolution_figure(records)
    FigureCanvasAgg(figure).draw()
    for axis in figure.axes[:len(SEARCHED)]:
        labels = drawn_labels(axis)
        boxes = sorted((label.get_window_extent() for label in labels), key=lambda box: box.x0)
        texts = (axis.get_title(), [label.get_text() for label in labels])
        assert 2 <= len(boxes) <= 6, texts
        assert all(left.x1 < right.x0 for left, right in itertools.pairwise(boxes)), texts
