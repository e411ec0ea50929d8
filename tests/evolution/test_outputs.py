"""evolve.csv, hyp_evolve.yaml and evolve.png from trial records."""

from __future__ import annotations

import csv
import dataclasses

from detect.config import load_hyp
from detect.evolution.outputs import (
    HYP_KEYS,
    TrialRecord,
    best_record,
    plot_evolution,
    write_best_hyp,
    write_csv,
)


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
    assert plot_evolution(_records(), tmp_path / "evolve.png").stat().st_size > 10_000
    assert plot_evolution(_records()[1:2], tmp_path / "empty.png").is_file()
