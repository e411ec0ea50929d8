"""torch_npu's GradScaler as the stand-in follows its 2.14.0 source (tests/npu_scaler_standin.py): its print()s go to
our log, a CPU or CUDA last.pt's scaler state resumes on the NPU (no "dynamic" key, or an empty state), and a step it
skips is counted in the epoch's numerics in INF_NAN mode and in saturation mode alike."""

from __future__ import annotations

import logging
import math
import signal

import pytest
import torch

from detect import train
from detect.backend import npu
from detect.training import hooks
from detect.training.epoch import StepNumerics
from detect.training.resume import TrainingCheckpoint
from detect.training.step import TrainingParts, optimizer_step
from tests.npu_scaler_standin import GradScaler
from tests.npu_standin import install, npu_backend
from tests.training.helpers import tiny_dataset, train_args

SCALER = {"init_scale": 2.0**16, "growth_factor": 2.0, "growth_interval": 1}


def scaled_step(scaler: torch.amp.GradScaler, gradient: float) -> tuple[torch.Tensor, torch.nn.Parameter]:
    """One optimizer_step of a one-weight model whose scaled gradient is `gradient` x the scale; (norm, weight)."""
    model = torch.nn.Module()
    model.weight = weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler.scale((weight * gradient).sum()).backward()
    parts = TrainingParts(model, criterion=None, optimizer=optimizer, scaler=scaler, ema=None, backend=None)
    return optimizer_step(parts), weight


def test_the_standin_scaler_is_torch_npus(monkeypatch, capsys):
    install(monkeypatch)
    scaler = GradScaler(**SCALER)
    scaled_step(scaler, 1e36)  # x 2**16 overflows float32
    assert capsys.readouterr().out.splitlines() == ["Gradient overflow. Skipping step",
                                                    "Loss scaler reducing loss scale to 32768.0"]
    scaled_step(scaler, 1.0)
    assert capsys.readouterr().out.splitlines() == ["Loss scaler increasing loss scale to 65536.0"]
    assert scaler.state_dict()["dynamic"] is True
    with pytest.raises(KeyError, match="dynamic"):  # torch_npu 2.14.0 grad_scaler.py L459
        GradScaler().load_state_dict(torch.amp.GradScaler("cpu").state_dict())
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        GradScaler().load_state_dict({})


def test_the_backends_scaler_logs_what_torch_npu_prints(monkeypatch, capsys, caplog):
    scaler = npu_backend(monkeypatch, amp=True).grad_scaler(**SCALER)
    with caplog.at_level(logging.DEBUG, logger=npu.__name__):
        scaled_step(scaler, 1e36)
        scaled_step(scaler, 1.0)
    assert capsys.readouterr().out == ""  # nothing through the progress bar
    assert [record.getMessage() for record in caplog.records] == [
        "torch_npu's GradScaler: Gradient overflow. Skipping step",
        "torch_npu's GradScaler: Loss scaler reducing loss scale to 32768.0",
        "torch_npu's GradScaler: Loss scaler increasing loss scale to 65536.0"]


def test_a_cpu_or_cuda_scaler_state_resumes_on_the_npu(monkeypatch, caplog):
    backend = npu_backend(monkeypatch, amp=True)
    saved = torch.amp.GradScaler("cpu", init_scale=1024.0)  # what a CUDA run saves too: torch's own GradScaler
    scaled_step(saved, 1.0)
    scaler = backend.grad_scaler(**SCALER)
    scaler.load_state_dict(saved.state_dict())
    assert scaler.get_scale() == 1024.0 and scaler.state_dict()["dynamic"] is True
    fresh = backend.grad_scaler(**SCALER)
    with caplog.at_level(logging.INFO, logger=npu.__name__):
        fresh.load_state_dict(torch.amp.GradScaler("cpu", enabled=False).state_dict())  # a CPU fp32 or bf16 run's: {}
    assert fresh.get_scale() == 2.0**16 and "had no fp16 loss scaling" in caplog.text


@pytest.mark.parametrize("inf_nan", [True, False])
def test_a_skipped_step_is_counted_in_either_overflow_mode(monkeypatch, inf_nan):
    """In saturation mode (INF_NAN_MODE_FORCE_DISABLE=1 on a 910B) an overflow leaves the gradients finite: only the
    scaler knows, and its scale drops; before the fix such a step counted as finite. In INF_NAN mode (the 910B's
    default) torch_npu's scaler decides per rank, from gradients that DDP has made the same on every rank."""
    backend = npu_backend(monkeypatch, amp=True)
    backend.torch_npu.inf_nan = inf_nan
    scaler, numerics = backend.grad_scaler(**SCALER), StepNumerics(torch.device("cpu"))
    norm, weight = scaled_step(scaler, 1e36)
    assert math.isinf(norm) and weight.item() == 1.0  # skipped
    numerics.add(norm, scaler)
    numerics.add(scaled_step(scaler, 1.0)[0], scaler)
    summary = numerics.summary()
    assert (summary["nonfinite_grad_steps"], summary["loss_scale_min"], summary["loss_scale_last"]) == (1, 32768.0,
                                                                                                      65536.0)


def on_the_standin(monkeypatch) -> None:
    """`--device npu:0` trains on the NPU stand-in, its tensors on the CPU."""
    install(monkeypatch, fallback="warn")
    original = npu.NpuBackend.__init__
    monkeypatch.setattr(npu.NpuBackend, "__init__",
                        lambda self, index=0, **options: original(self, index, device=torch.device("cpu"), **options))


@pytest.mark.slow
def test_a_cpu_run_resumes_on_the_npu(tmp_path, monkeypatch, caplog):
    """A CPU run (fp32: its scaler state is empty) stopped in epoch 2 resumes with --device npu:0, where AMP is fp16
    with torch_npu's GradScaler; before the fix its load_state_dict refused the state."""
    data = tiny_dataset(tmp_path / "data")
    steps = []

    def stop_at_the_third_step(self, run, index, batch) -> None:
        steps.append(index)
        if len(steps) >= 3:
            run.control.stop_signal = signal.SIGTERM

    with monkeypatch.context() as patch:
        patch.setattr(hooks.SignalStop, "before_step", stop_at_the_third_step)
        assert train.main(train_args(data, tmp_path, "--noval", "--noplots")) == 143
    on_the_standin(monkeypatch)
    with caplog.at_level(logging.INFO):
        assert train.main(["--resume", str(tmp_path / "exp"), "--device", "npu:0", "--no-progress"]) == 0
    assert "had no fp16 loss scaling" in caplog.text
    resumed = TrainingCheckpoint.load(tmp_path / "exp" / "weights" / "last.pt")
    assert resumed.counters.epoch == 2 and resumed.scaler["dynamic"] is True and resumed.scaler["scale"] > 0
