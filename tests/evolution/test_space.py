"""The search space: yolov5's meta table as data, and the hyps drawn from it."""

from __future__ import annotations

import dataclasses

import pytest

from detect.config import Hyp, load_hyp
from detect.evolution.space import SEARCHED, SPACE, start_params, suggest_hyp


class Highest:
    """A stand-in trial that proposes the top of every range (and records what it was offered)."""

    def __init__(self) -> None:
        self.offered: dict[str, tuple[float, float, bool]] = {}

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float:
        self.offered[name] = (low, high, log)
        return high


def test_every_key_is_a_hyp_field_and_yolov5s_fixed_keys_stay_fixed():
    fields = {field.name for field in dataclasses.fields(Hyp)}
    assert set(SPACE) <= fields
    assert set(SPACE) - set(SEARCHED) == {"iou_t", "fl_gamma", "perspective", "fliplr"}  # mutation gain 0
    assert all(bounds.low < bounds.high for bounds in SPACE.values())


def test_a_drawn_hyp_moves_searched_keys_only():
    start = load_hyp("scratch-low.yaml")
    trial = Highest()
    hyp = suggest_hyp(trial, start)
    assert set(trial.offered) == set(SEARCHED)
    assert hyp.lr0 == SPACE["lr0"].high and trial.offered["lr0"][2]  # lr0 on a log scale
    for name in ("iou_t", "fl_gamma", "perspective", "fliplr", "albumentations_p", "amp_init_scale"):
        assert getattr(hyp, name) == getattr(start, name), name


def test_a_start_value_outside_a_range_widens_it():
    start = dataclasses.replace(load_hyp("scratch-low.yaml"), degrees=60.0)
    trial = Highest()
    suggest_hyp(trial, start)
    assert trial.offered["degrees"][:2] == (0.0, 60.0)
    assert start_params(start)["degrees"] == 60.0


@pytest.mark.parametrize("name", ["scratch-low.yaml", "scratch-high.yaml"])
def test_start_params_reproduce_the_start_hyp(name):
    start = load_hyp(name)
    params = start_params(start)
    assert dataclasses.replace(start, **params) == start and set(params) == set(SEARCHED)


def test_every_range_lies_inside_what_its_hyp_key_accepts():
    bounds = {field.name: field.metadata["bound"] for field in dataclasses.fields(Hyp)}
    for name, space in SPACE.items():
        assert bounds[name].accept(space.low) and bounds[name].accept(space.high), name


class Lowest(Highest):
    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float:
        super().suggest_float(name, low, high, log=log)
        return low


@pytest.mark.parametrize("trial", [Highest, Lowest])
def test_a_proposal_at_either_end_is_a_valid_hyp(trial):
    start = dataclasses.replace(load_hyp("scratch-high.yaml"), degrees=60.0, momentum=0.99)  # outside the table
    hyp = suggest_hyp(trial(), start)  # Hyp checks every key as it is made: a value outside would raise
    assert hyp.momentum in (0.6, 0.99) and hyp.degrees in (0.0, 60.0)
