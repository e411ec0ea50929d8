"""Optimizer groups, schedule and warmup against hand-computed values
(docs/yolov5.md, "Optimizer and weight decay", "Learning-rate schedule and warmup")."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from detect.config import Hyp
from detect.errors import UserError
from detect.training.optim import (
    OptimSettings,
    accumulate_steps,
    apply_warmup,
    build_optimizer,
    build_scheduler,
    lr_lambda,
    warmup_iterations,
)


class ScaleNormLayer(nn.Module):
    """A custom normalisation: its weight goes to the no-decay group by class name, its `scale` is decayed."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.scale = nn.Parameter(torch.ones(3))


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1, bias=False)
        self.bn = nn.BatchNorm2d(3)
        self.custom = ScaleNormLayer()
        self.head = nn.Conv2d(3, 2, 1)
        self.frozen = nn.Linear(2, 2)
        self.frozen.requires_grad_(False)


def settings(optimizer: str = "SGD", cosine: bool = False) -> OptimSettings:
    return OptimSettings.from_hyp(Hyp(), optimizer, cosine)


def ids(parameters) -> list[int]:
    return [id(p) for p in parameters]


@pytest.mark.parametrize(("batch", "expected"), [(1, 64), (16, 4), (24, 3), (40, 2), (48, 1), (64, 1), (128, 1),
                                                 (256, 1)])
def test_accumulate_steps(batch: int, expected: int) -> None:
    assert accumulate_steps(batch) == expected


def test_groups_hold_biases_decayed_and_norm_weights_in_order() -> None:
    model = Tiny()
    groups = build_optimizer(model, settings(), batch_size=16).param_groups
    assert len(groups) == 3
    assert ids(groups[0]["params"]) == ids([model.bn.bias, model.head.bias])
    assert ids(groups[1]["params"]) == ids([model.conv.weight, model.custom.scale, model.head.weight])
    assert ids(groups[2]["params"]) == ids([model.bn.weight, model.custom.weight])
    # The frozen layer's parameters are in no group.
    grouped = {id(p) for group in groups for p in group["params"]}
    assert not grouped & set(ids(model.frozen.parameters()))


@pytest.mark.parametrize(("batch", "decay"), [(16, 5e-4), (24, 5e-4 * 72 / 64), (48, 5e-4 * 48 / 64),
                                              (128, 1e-3)])
def test_weight_decay_scales_with_images_per_step(batch: int, decay: float) -> None:
    groups = build_optimizer(Tiny(), settings(), batch_size=batch).param_groups
    assert [g["weight_decay"] for g in groups] == pytest.approx([0.0, decay, 0.0], rel=1e-12)


def test_sgd_is_nesterov_with_hyp_momentum() -> None:
    optimizer = build_optimizer(Tiny(), settings(), batch_size=16)
    assert isinstance(optimizer, torch.optim.SGD)
    assert all(g["nesterov"] and g["momentum"] == 0.937 and g["lr"] == 0.01 for g in optimizer.param_groups)


@pytest.mark.parametrize(("name", "kind"), [("Adam", torch.optim.Adam), ("AdamW", torch.optim.AdamW)])
def test_adam_betas_and_no_bias_decay(name: str, kind: type) -> None:
    optimizer = build_optimizer(Tiny(), settings(name), batch_size=16)
    assert type(optimizer) is kind
    assert [g["betas"] for g in optimizer.param_groups] == [(0.937, 0.999)] * 3
    # AdamW's own default decay (0.01) must not reach the bias group.
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.0, 5e-4, 0.0]


def test_an_empty_group_is_kept() -> None:
    optimizer = build_optimizer(nn.Linear(2, 2, bias=False), settings(), batch_size=16)
    assert [len(g["params"]) for g in optimizer.param_groups] == [0, 1, 0]


def test_unknown_optimizer_names_the_choices() -> None:
    with pytest.raises(UserError, match="SGD, Adam, AdamW"):
        settings("RMSprop")


def test_linear_and_cosine_factors() -> None:
    linear, cosine = lr_lambda(settings(), 300), lr_lambda(settings(cosine=True), 300)
    # lrf 0.01: linear (1 - x/300) * 0.99 + 0.01; cosine (1 - cos(pi x/300)) / 2 * (0.01 - 1) + 1.
    assert [linear(x) for x in (0, 75, 150, 300)] == pytest.approx([1.0, 0.7525, 0.505, 0.01])
    assert [cosine(x) for x in (0, 75, 150, 300)] == pytest.approx([1.0, 0.8550179, 0.505, 0.01])


def test_scheduler_sets_every_group_and_its_state_loads_weights_only() -> None:
    optimizer = build_optimizer(Tiny(), settings(), batch_size=16)
    scheduler = build_scheduler(optimizer, settings(), epochs=4)
    assert [g["initial_lr"] for g in optimizer.param_groups] == [0.01] * 3
    optimizer.step()
    scheduler.step()
    scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.01 * (0.5 * 0.99 + 0.01)] * 3)
    buffer = io.BytesIO()
    torch.save(scheduler.state_dict(), buffer)
    buffer.seek(0)
    restored = build_scheduler(build_optimizer(Tiny(), settings(), 16), settings(), epochs=4)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.last_epoch == 2


@pytest.mark.parametrize(("epochs", "batches", "expected"), [(3.0, 10, 100), (3.0, 100, 300), (0.5, 301, 150),
                                                             (0.5, 303, 152)])
def test_warmup_iterations(epochs: float, batches: int, expected: int) -> None:
    assert warmup_iterations(OptimSettings.from_hyp(Hyp(warmup_epochs=epochs)), batches) == expected


def warmed(optimizer_name: str, iteration: int, lr_factor: float = 0.5, batch: int = 16):
    optimizer = build_optimizer(Tiny(), settings(optimizer_name), batch_size=batch)
    build_scheduler(optimizer, settings(optimizer_name), epochs=3)
    accumulate = apply_warmup(optimizer, settings(optimizer_name), iteration, 100, lr_factor, batch)
    return optimizer.param_groups, accumulate


def test_warmup_start() -> None:
    groups, accumulate = warmed("SGD", 0)
    assert [g["lr"] for g in groups] == [0.1, 0.0, 0.0]
    assert [g["momentum"] for g in groups] == [0.8] * 3
    assert accumulate == 1


def test_warmup_middle_interpolates_and_rounds_half_to_even() -> None:
    groups, accumulate = warmed("SGD", 50)
    target = 0.01 * 0.5  # initial_lr * lr_factor
    assert [g["lr"] for g in groups] == pytest.approx([(0.1 + target) / 2, target / 2, target / 2])
    assert [g["momentum"] for g in groups] == pytest.approx([(0.8 + 0.937) / 2] * 3)
    assert accumulate == 2  # 1 + (4 - 1) / 2 = 2.5 rounds to 2
    _, accumulate = warmed("SGD", 75)
    assert accumulate == 3  # 3.25


def test_warmup_end_reaches_the_schedule() -> None:
    groups, accumulate = warmed("SGD", 100, lr_factor=0.67)
    assert [g["lr"] for g in groups] == pytest.approx([0.0067] * 3)
    assert [g["momentum"] for g in groups] == pytest.approx([0.937] * 3)
    assert accumulate == 4


def test_after_warmup_nothing_changes() -> None:
    optimizer = build_optimizer(Tiny(), settings(), batch_size=24)
    build_scheduler(optimizer, settings(), epochs=3)
    for group in optimizer.param_groups:
        group["lr"], group["momentum"] = 0.123, 0.456
    assert apply_warmup(optimizer, settings(), 101, 100, 0.5, 24) == 3
    assert [(g["lr"], g["momentum"]) for g in optimizer.param_groups] == [(0.123, 0.456)] * 3


def test_adam_warmup_leaves_betas_alone() -> None:
    # yolov5 warms up only groups with a 'momentum' entry (SGD), never Adam's beta1.
    groups, _ = warmed("AdamW", 50)
    assert [g["betas"] for g in groups] == [(0.937, 0.999)] * 3
    assert all("momentum" not in g for g in groups)
