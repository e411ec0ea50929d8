"""Autocast defaults (the CPU: fp32 until training times bf16 on the model, whatever /proc/cpuinfo lists) and
GradScaler construction from the three scaler settings (CPU and CUDA glue)."""

import os

import pytest
import torch

from detect.backend import cpu, select
from detect.errors import UserError

SCALER = {"init_scale": 1024.0, "growth_factor": 3.0, "growth_interval": 17}


def matmul_dtype(backend):
    a = torch.randn(4, 4)
    with backend.autocast():
        return (a @ a).dtype


@pytest.mark.parametrize("flags", [("avx2", "fma", "avx512f", "avx512_vnni"),
                                   ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16")])
def test_the_cpu_is_fp32_until_training_times_bf16_whatever_its_flags(monkeypatch, flags):
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset(flags))  # no flag turns bf16 on (training times it)
    backend = select("cpu")
    assert backend.amp_enabled is False and backend.amp_dtype is None and backend.amp_timed is True
    assert matmul_dtype(backend) == torch.float32 and backend.precision() == "fp32"
    bf16 = select("cpu", amp=True)  # what training's timing picks where bf16 is clearly faster
    assert bf16.amp_dtype == torch.bfloat16 and matmul_dtype(bf16) == torch.bfloat16
    assert bf16.precision() == "bf16 autocast"
    assert bf16.grad_scaler(**SCALER).is_enabled() is False  # bf16 needs no loss scaling
    with bf16.validation_autocast():  # validation during training stays fp32 on the CPU
        assert torch.randn(2, 2).matmul(torch.randn(2, 2)).dtype == torch.float32


def test_the_cpu_is_read_from_proc_cpuinfo(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                    "flags\t\t: fpu avx2 fma avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8\n\n"
                    "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu\n")
    monkeypatch.setattr(cpu, "_CPUINFO", info)
    assert "amx_bf16" in cpu.cpu_flags() and select("cpu").device_name() == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.cpu_description() == (f"CPU: Intel(R) Xeon(R) Platinum 8480+, {os.cpu_count()} cores; has avx2 fma "
                                     "avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8; lacks avx_vnni")
    monkeypatch.setattr(cpu, "_CPUINFO", tmp_path / "absent")  # not Linux
    assert cpu.cpu_flags() == frozenset() and select("cpu").amp_enabled is False
    assert cpu.cpu_description().endswith("; has none; lacks " + " ".join(cpu.SPEED_FLAGS))


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
