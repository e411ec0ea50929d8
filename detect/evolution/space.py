"""yolov5's hyper-parameter search space (its evolve `meta` table) as data, and a trial's hyp drawn from it."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from detect.config import Hyp


@dataclasses.dataclass(frozen=True)
class Range:
    """Where evolution may move one hyp value; `searched` False keeps the start value (yolov5's mutation gain 0)."""

    low: float
    high: float
    searched: bool = True
    log: bool = False  # sample on a log scale (a range over decades)


# yolov5 train.py's evolve meta table: (lower, upper) per key, and the keys whose mutation gain is 0 kept fixed.
# yolov5's "anchors" entry (anchors per level) has no Hyp field here: the model yaml gives the anchors.
# lr0 spans four decades, so it is sampled on a log scale (yolov5's mutations are multiplicative too).
SPACE: dict[str, Range] = {
    "lr0": Range(1e-5, 1e-1, log=True),
    "lrf": Range(0.01, 1.0),
    "momentum": Range(0.6, 0.98),
    "weight_decay": Range(0.0, 0.001),
    "warmup_epochs": Range(0.0, 5.0),
    "warmup_momentum": Range(0.0, 0.95),
    "warmup_bias_lr": Range(0.0, 0.2),
    "box": Range(0.02, 0.2),
    "cls": Range(0.2, 4.0),
    "cls_pw": Range(0.5, 2.0),
    "obj": Range(0.2, 4.0),
    "obj_pw": Range(0.5, 2.0),
    "iou_t": Range(0.1, 0.7, searched=False),
    "anchor_t": Range(2.0, 8.0),
    "fl_gamma": Range(0.0, 2.0, searched=False),
    "hsv_h": Range(0.0, 0.1),
    "hsv_s": Range(0.0, 0.9),
    "hsv_v": Range(0.0, 0.9),
    "degrees": Range(0.0, 45.0),
    "translate": Range(0.0, 0.9),
    "scale": Range(0.0, 0.9),
    "shear": Range(0.0, 10.0),
    "perspective": Range(0.0, 0.001, searched=False),
    "flipud": Range(0.0, 1.0),
    "fliplr": Range(0.0, 1.0, searched=False),
    "mosaic": Range(0.0, 1.0),
    "mixup": Range(0.0, 1.0),
    "copy_paste": Range(0.0, 1.0),
}
SEARCHED = tuple(name for name, bounds in SPACE.items() if bounds.searched)


class Suggester(Protocol):
    """What a trial offers to draw values (optuna.Trial has it)."""

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float: ...


def start_params(start: Hyp) -> dict[str, float]:
    """The searched values of `start`, as a trial's parameters (the first trial runs exactly these)."""
    return {name: float(getattr(start, name)) for name in SEARCHED}


def suggest_hyp(trial: Suggester, start: Hyp) -> Hyp:
    """`start` with every searched key drawn by `trial`; a range is widened to hold the start value."""
    values: dict[str, Any] = {}
    for name in SEARCHED:
        bounds, value = SPACE[name], float(getattr(start, name))
        low, high = min(bounds.low, value), max(bounds.high, value)
        values[name] = trial.suggest_float(name, low, high, log=bounds.log and low > 0)
    return dataclasses.replace(start, **values)
