"""ModelEMA against a hand computation of yolov5's decay sequence (docs/yolov5.md, "EMA")."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

from detect.training.optim import ModelEMA, unwrap_model


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)
        self.bn = nn.BatchNorm2d(2)
        self.register_buffer("anchors", torch.tensor([[10.0, 13.0], [16.0, 30.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


def fill(model: nn.Module, value: float) -> None:
    """Every float entry of the state dict set to `value`."""
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype.is_floating_point:
                tensor.fill_(value)


def test_decay_sequence_matches_hand_computation() -> None:
    model = Tiny()
    fill(model, 0.0)
    ema = ModelEMA(model, decay=0.9, tau=2.0)
    # By hand, d_k = 0.9 (1 - e^(-k/2)) with k counted before use: 0.354122, 0.568909, 0.699183;
    # e_k = d_k e_(k-1) + (1 - d_k) m_k from e_0 = 0 with m = 1, -2, 4.
    steps = [(1.0, 0.354122, 0.645878), (-2.0, 0.568909, -0.494738), (4.0, 0.699183, 0.857356)]
    for count, (value, decay, expected) in enumerate(steps, start=1):
        fill(model, value)
        ema.update(model)
        assert ema.updates == count
        assert ema.current_decay() == pytest.approx(decay, abs=1e-6)
        for name, tensor in ema.module.state_dict().items():
            if tensor.dtype.is_floating_point:
                assert torch.allclose(tensor, torch.full_like(tensor, expected), atol=1e-6), name


def test_default_decay_follows_yolov5() -> None:
    ema = ModelEMA(Tiny(), updates=2000)
    assert ema.current_decay() == pytest.approx(0.9999 * (1 - math.exp(-1)))


def test_bn_statistics_averaged_and_counters_copied() -> None:
    torch.manual_seed(0)
    model = Tiny()
    ema = ModelEMA(model, decay=0.9, tau=2.0)
    old_mean = ema.module.bn.running_mean.clone()
    for _ in range(3):
        model(torch.randn(4, 2, 3, 3) * 5 + 3)
    ema.update(model)
    decay = 0.9 * (1 - math.exp(-0.5))
    assert torch.allclose(ema.module.bn.running_mean, decay * old_mean + (1 - decay) * model.bn.running_mean)
    assert not torch.equal(ema.module.bn.running_mean, model.bn.running_mean)
    assert ema.module.bn.num_batches_tracked.item() == 3  # copied, not averaged towards 0


def test_copy_is_independent_eval_mode_and_frozen() -> None:
    model = Tiny().train()
    ema = ModelEMA(model)
    assert ema.module is not model and not ema.module.training
    assert not any(p.requires_grad for p in ema.module.parameters())
    fill(model, 7.0)
    assert not torch.equal(ema.module.anchors, model.anchors)  # nothing moves until update


class Compiled(nn.Module):
    """Stands in for torch.compile's OptimizedModule (its `_orig_mod`), without dynamo's 6 s import."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._orig_mod = model


@pytest.mark.parametrize("wrap", [nn.DataParallel, Compiled, lambda m: Compiled(nn.DataParallel(m))])
def test_wrappers_are_unwrapped(wrap) -> None:
    model = Tiny()
    wrapped = wrap(model)
    assert unwrap_model(wrapped) is model
    ema = ModelEMA(wrapped, decay=0.9, tau=2.0)
    assert type(ema.module) is Tiny
    fill(model, 1.0)
    ema.update(wrapped)  # keys without a "module." or "_orig_mod." prefix, or this raises KeyError
    decay = 0.9 * (1 - math.exp(-0.5))
    assert torch.allclose(ema.module.anchors, decay * torch.tensor([[10.0, 13.0], [16.0, 30.0]]) + (1 - decay))


def test_state_round_trips_through_weights_only_save_and_deepcopy() -> None:
    model = Tiny()
    ema = ModelEMA(model, decay=0.9, tau=2.0)
    fill(model, 3.0)
    ema.update(model)
    buffer = io.BytesIO()
    torch.save(ema.state_dict(), buffer)
    buffer.seek(0)
    restored = ModelEMA(Tiny())
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.updates == 1
    assert torch.equal(restored.module.conv.weight, ema.module.conv.weight)
    twin = copy.deepcopy(ema)
    twin.update(model)
    assert twin.updates == 2 and ema.updates == 1
    assert not torch.equal(twin.module.conv.weight, ema.module.conv.weight)
