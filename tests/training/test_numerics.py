"""Numerics in the log: gradient norms before clipping, steps skipped for non-finite gradients, the AMP loss scale
per epoch, summed on the device and read once; and results.csv's columns of a real run."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from detect import train
from detect.training.epoch import StepNumerics
from tests.training.helpers import tiny_dataset, train_args


def _scaler_after(found_inf: bool, scaler: torch.amp.GradScaler) -> None:
    """One scaled step of a one-parameter model whose gradient is finite or not."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    loss = (weight * (math.inf if found_inf else 1.0)).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def test_step_numerics_count_norms_and_the_loss_scale():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1000)
    numerics = StepNumerics(torch.device("cpu"))
    for norm, found_inf in ((1.0, False), (math.inf, True), (3.0, False)):
        _scaler_after(found_inf, scaler)
        numerics.add(torch.tensor(norm), scaler)
    summary = numerics.summary()
    assert summary == {"nonfinite_grad_steps": 1, "grad_norm_mean": 2.0, "grad_norm_max": 3.0,
                       "loss_scale_min": 512.0, "loss_scale_last": 512.0}  # halved once by the overflow


def test_without_loss_scaling_the_scale_is_empty():
    numerics = StepNumerics(torch.device("cpu"))
    numerics.add(torch.tensor(0.5), torch.amp.GradScaler("cpu", enabled=False))
    assert numerics.summary()["loss_scale_min"] is None and numerics.summary()["grad_norm_max"] == 0.5


def test_results_csv_holds_the_numerics_of_every_epoch(tmp_path):
    data = tiny_dataset(tmp_path / "data")
    assert train.main(train_args(data, tmp_path, "--noval", "--noplots")) == 0
    with open(tmp_path / "exp" / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2
    for row in rows:
        assert row["train/nonfinite_loss_steps"] == row["train/nonfinite_grad_steps"] == "0"
        assert 0 < float(row["train/grad_norm_mean"]) <= float(row["train/grad_norm_max"])
        assert row["amp/loss_scale_min"] == row["amp/loss_scale_last"] == ""  # fp32 on the CPU: no loss scaling
        assert float(row["x/lr0"]) > 0 and float(row["x/lr1"]) > 0 and float(row["x/lr2"]) > 0


@pytest.mark.parametrize("bad", [math.nan, -math.inf])
def test_a_non_finite_norm_is_counted_not_averaged(bad):
    numerics = StepNumerics(torch.device("cpu"))
    numerics.add(torch.tensor(bad), torch.amp.GradScaler("cpu", enabled=False))
    assert numerics.summary()["nonfinite_grad_steps"] == 1 and numerics.summary()["grad_norm_mean"] is None
