"""Autocast defaults and GradScaler construction from the three scaler settings (CPU and CUDA glue)."""

import pytest
import torch

from detect.backend import select
from detect.errors import UserError

SCALER = {"init_scale": 1024.0, "growth_factor": 3.0, "growth_interval": 17}


def matmul_dtype(backend):
    a = torch.randn(4, 4)
    with backend.autocast():
        return (a @ a).dtype


def test_cpu_autocast_off_by_default():
    backend = select("cpu")
    assert backend.amp_enabled is False and backend.amp_dtype is None
    assert matmul_dtype(backend) == torch.float32


@pytest.mark.parametrize("options", [{"amp": True}, {"amp_dtype": "bf16"}, {"amp": True, "amp_dtype": "bfloat16"}])
def test_cpu_bf16_when_asked(options):
    backend = select("cpu", **options)
    assert backend.amp_enabled and backend.amp_dtype == torch.bfloat16
    assert matmul_dtype(backend) == torch.bfloat16


def test_amp_false_wins_over_dtype():
    assert select("cpu", amp=False, amp_dtype="bf16").amp_enabled is False


@pytest.mark.parametrize("options", [{}, {"amp": True}])
def test_cpu_scaler_is_a_working_no_op(options):
    scaler = select("cpu", **options).grad_scaler(**SCALER)
    assert scaler.is_enabled() is False and scaler.get_scale() == 1.0
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    loss = (weight * 2).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(weight.detach(), torch.zeros(2))
    scaler.load_state_dict(scaler.state_dict())


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_cuda_defaults_to_fp16_and_scaler_uses_the_settings(fake_cuda):
    backend = select("cuda")
    assert backend.amp_enabled and backend.amp_dtype == torch.float16
    scaler = backend.grad_scaler(**SCALER)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()
    assert (scaler.get_scale(), scaler.get_growth_factor(), scaler.get_growth_interval()) == (1024.0, 3.0, 17)


@pytest.mark.parametrize("options", [{"amp": False}, {"amp_dtype": "bf16"}])
def test_cuda_scaler_off_without_fp16(fake_cuda, options):
    assert select("cuda", **options).grad_scaler(**SCALER).is_enabled() is False


def test_scaler_settings_are_keyword_only():
    with pytest.raises(TypeError):
        select("cpu").grad_scaler(1024.0, 3.0, 17)


@pytest.mark.parametrize("bad", [{"init_scale": 0.0}, {"growth_factor": 1.0}, {"growth_interval": 0}])
def test_bad_scaler_settings_are_one_user_error(bad):
    with pytest.raises(UserError, match="init_scale > 0, growth_factor > 1 and growth_interval >= 1"):
        select("cpu").grad_scaler(**{**SCALER, **bad})
