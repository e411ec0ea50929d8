"""The start-up AMP check: a model's predictions under autocast against fp32 on a bundled image; AMP turned off with
one line when they disagree, on the main rank's word. On the CPU the AMP timing comes first (faked here:
tests/backend/test_amp_speed.py times for real)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from detect import backend as backends
from detect.backend import amp_check
from detect.backend.amp_check import check_amp, image_batch
from detect.inference.sample_images import sample_images
from detect.models import build_model
from detect.models.weights import load_model
from detect.training.distributed import DistContext
from detect.training.settings import TrainSettings
from detect.training.setup import build as build_module
from detect.training.setup.recipe import PrecisionRequest, precision_request
from tests.npu_standin import npu_backend
from tests.shared_data import ABSENT_REASON, SHARED_PRESENT, YOLOV5N


def _recipe(settings: TrainSettings) -> SimpleNamespace:
    """What the AMP check reads of a run's recipe: the precision asked, the image size, this rank's batch and job, the
    cache folder."""
    return SimpleNamespace(precision=precision_request(settings, DistContext()), imgsz=settings.imgsz,
                           loop=SimpleNamespace(rank_batch=settings.batch_size), context=DistContext(),
                           split_check=SimpleNamespace(cache_dir=settings.cache_dir))


def _model(pretrained: bool):
    if pretrained and not SHARED_PRESENT:
        pytest.skip(ABSENT_REASON)
    return (load_model(YOLOV5N) if pretrained else build_model("yolov5n.yaml", num_classes=80)).eval()


@pytest.mark.parametrize("pretrained", [False, True])
def test_cpu_bf16_agrees_with_fp32(pretrained):
    cpu = backends.select("cpu", amp=True)  # bf16 on the CPU
    check = check_amp(_model(pretrained).predict, image_batch(sample_images()[0], 320, cpu.device), cpu)
    assert check.agrees, str(check)
    assert check.nonfinite == 0 and check.score_error > 0  # bf16 is not fp32: the two passes really differ
    if pretrained:
        assert 0 < check.box_error <= 0.02  # yolov5n is confident about the astronaut


def test_the_npu_standin_fp16_agrees_with_fp32(monkeypatch):
    npu = npu_backend(monkeypatch)  # fp16 autocast, its tensors on the CPU
    assert npu.amp_enabled and npu.amp_dtype == torch.float16
    check = check_amp(_model(False).predict, image_batch(sample_images()[0], 160, npu.device), npu)
    assert check.agrees, str(check)


def _broken_under_autocast(model):
    """model.predict, but its confidences are wrong whenever autocast is on (an fp16 overflow, say)."""
    def predict(images):
        rows = model.predict(images)
        if torch.is_autocast_enabled(images.device.type):
            rows = rows.clone()
            rows[..., 4:] = 1.0 - rows[..., 4:]
        return rows
    return predict


def test_a_model_that_breaks_under_autocast_disagrees():
    cpu = backends.select("cpu", amp=True)
    check = check_amp(_broken_under_autocast(_model(False)), image_batch(sample_images()[0], 160, cpu.device), cpu)
    assert not check.agrees and check.score_error > 0.05


def test_disagreement_turns_amp_off_with_one_line(monkeypatch, caplog):
    npu = npu_backend(monkeypatch)
    model = _model(False)
    monkeypatch.setattr(model, "predict", _broken_under_autocast(build_model("yolov5n.yaml", num_classes=80).eval()))
    chosen = []
    fp32 = backends.select("cpu", amp=False)
    monkeypatch.setattr(PrecisionRequest, "backend", lambda request: chosen.append(request.amp) or fp32)
    settings = TrainSettings(cfg="yolov5n.yaml", device="npu", imgsz=160)
    with caplog.at_level(logging.WARNING):
        assert build_module._amp_checked(npu, model, _recipe(settings)) is fp32
    assert chosen == [False]
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "AMP check: autocast's predictions differ from fp32's"]
    assert "training in fp32 (--amp forces AMP)" in caplog.records[0].getMessage()


@pytest.mark.parametrize("amp", [True, False])
def test_amp_given_on_the_command_line_is_obeyed_unchecked(monkeypatch, amp):
    npu = npu_backend(monkeypatch)
    model = _model(False)
    monkeypatch.setattr(model, "predict", lambda images: pytest.fail("checked although --amp/--no-amp was given"))
    settings = TrainSettings(cfg="yolov5n.yaml", device="npu", amp=amp)
    assert build_module._amp_checked(npu, model, _recipe(settings)) is npu


def _precision_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == build_module.__name__]


@pytest.fixture
def bf16_timed_at(monkeypatch):
    """Call it with a speedup: the AMP timing's steps then take 1 s in fp32 and 1/speedup s in bf16 (time_amp faked,
    the verdict's cache real)."""
    def fake(speedup: float) -> None:
        monkeypatch.setattr(amp_check, "time_amp", lambda model, backend, batch_size, imgsz: amp_check.AmpSpeed(
            (1.0,), (1.0 / speedup,), "bf16", "CPU"))
    return fake


def test_a_cpu_whose_bf16_times_faster_checks_it_keeps_it_and_says_so(bf16_timed_at, caplog, tmp_path):
    bf16_timed_at(1.48)
    settings = TrainSettings(cfg="yolov5n.yaml", device="cpu", imgsz=64, cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO):
        chosen = build_module._amp_checked(backends.select("cpu"), _model(False), _recipe(settings))
    assert chosen.amp_dtype == torch.bfloat16
    lines = _precision_lines(caplog)
    assert lines[0].startswith("AMP check: autocast agrees with fp32") and len(lines) == 2
    assert lines[1] == "precision: bf16 autocast (bf16 measured 1.48x fp32 on this CPU; --no-amp for fp32)"


def test_a_cpu_whose_bf16_times_slower_trains_fp32_unchecked_and_says_what_was_measured(bf16_timed_at, monkeypatch,
                                                                                       caplog, tmp_path):
    bf16_timed_at(0.46)
    model = _model(False)
    monkeypatch.setattr(model, "predict", lambda images: pytest.fail("checked although bf16 timed slower"))
    settings = TrainSettings(cfg="yolov5n.yaml", device="cpu", imgsz=64, cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO):
        assert build_module._amp_checked(backends.select("cpu"), model, _recipe(settings)).amp_enabled is False
    assert _precision_lines(caplog) == ["precision: fp32 (bf16 measured 0.46x fp32 on this CPU; --amp forces it)"]


def test_the_check_turns_the_cpus_timed_bf16_off(bf16_timed_at, monkeypatch, caplog, tmp_path):
    bf16_timed_at(2.0)
    model = _model(False)
    monkeypatch.setattr(model, "predict", _broken_under_autocast(build_model("yolov5n.yaml", num_classes=80).eval()))
    settings = TrainSettings(cfg="yolov5n.yaml", device="cpu", imgsz=64, cache_dir=str(tmp_path))
    with caplog.at_level(logging.INFO):
        chosen = build_module._amp_checked(backends.select("cpu"), model, _recipe(settings))
    assert chosen.amp_enabled is False
    lines = _precision_lines(caplog)
    assert lines[0].startswith("AMP check: autocast's predictions differ from fp32's") and len(lines) == 2
    assert lines[1] == "precision: fp32 (the AMP check turned bf16 autocast off; --amp forces it)"


@pytest.mark.parametrize(("amp", "line"), [(False, "precision: fp32 (--no-amp)"),
                                           (True, "precision: bf16 autocast (--amp)")])
def test_the_cpu_precision_given_is_neither_timed_nor_checked(monkeypatch, caplog, amp, line):
    model = _model(False)
    monkeypatch.setattr(model, "predict", lambda images: pytest.fail("checked although --amp/--no-amp was given"))
    monkeypatch.setattr(amp_check, "time_amp", lambda *args: pytest.fail("timed although --amp/--no-amp was given"))
    cpu = backends.select("cpu", amp=amp)
    with caplog.at_level(logging.INFO):
        assert build_module._amp_checked(cpu, model, _recipe(TrainSettings(cfg="yolov5n.yaml", device="cpu",
                                                                           amp=amp))) is cpu
    assert _precision_lines(caplog) == [line]
