"""The AMP timing: the verdict as a function of measured seconds, the timing itself on a real model (which it leaves
untouched), and its cache (per device, CPU flags, torch, threads, model, batch and size; unreadable or unwritable
said in a line)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from detect import backend as backends
from detect.backend import amp_check, cpu
from detect.backend.amp_check import AmpSpeed, amp_speed, time_amp, timed_enough
from detect.models import build_model


@pytest.mark.parametrize(("fp32", "bf16", "faster", "line"), [
    ((1.0,), (2.17,), False, "bf16 measured 0.46x fp32 on this CPU"),  # the 5th-gen Xeon under load
    ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), False, "bf16 measured 1.00x fp32 on this CPU"),  # a tie goes to fp32
    ((1.14,), (1.0,), False, "bf16 measured 1.14x fp32 on this CPU"),  # faster, but not clearly
    ((1.15,), (1.0,), True, "bf16 measured 1.15x fp32 on this CPU"),
    ((1.48, 1.48), (1.0, 1.0), True, "bf16 measured 1.48x fp32 on this CPU"),  # Zen 4, idle
    # the median of the rounds' ratios: one round swung by the load does not decide
    ((1.0, 1.0, 1.0), (0.5, 0.8, 3.0), True, "bf16 measured 1.25x fp32 on this CPU"),
    ((2.0, 1.0, 1.0), (1.0, 1.0, 1.0), False, "bf16 measured 1.00x fp32 on this CPU"),
])
def test_bf16_is_kept_only_where_it_measures_clearly_faster(fp32, bf16, faster, line):
    speed = AmpSpeed(fp32, bf16, "bf16", "CPU")
    assert speed.faster is faster and str(speed) == line


@pytest.mark.parametrize(("speedups", "seconds", "enough"), [
    ([], 0.0, False), ([], 99.0, False),  # a round at least
    ([0.3], 1.0, True), ([3.5], 1.0, True),  # three times CLEARLY_FASTER off, either way: one round decides
    ([0.5], 99.0, False), ([2.3], 1.0, False), ([1.2], 1.0, False),  # a second round, however long the first took
    ([1.2, 1.1], 1.0, False), ([1.2, 1.1], 10.0, True),  # a third while the budget lasts
    ([1.2, 1.1, 1.3], 1.0, True),
])
def test_the_rounds_end_once_they_decide_or_the_budget_is_spent(speedups, seconds, enough):
    assert timed_enough(speedups, seconds) is enough


def test_the_timing_runs_the_model_in_both_precisions_and_leaves_it_as_it_was():
    model = build_model("yolov5n.yaml", num_classes=3).train().to(memory_format=torch.channels_last)
    state = {name: value.clone() for name, value in model.state_dict().items()}
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    speed = time_amp(model, backends.select("cpu", amp=True), 2, 64)
    assert 1 <= len(speed.fp32_seconds) == len(speed.amp_seconds) <= amp_check.ROUNDS
    assert min(speed.fp32_seconds + speed.amp_seconds) > 0 and (speed.dtype, speed.device) == ("bf16", "CPU")
    assert all(torch.equal(state[name], value) for name, value in model.state_dict().items())  # batch norm too
    assert all(parameter.grad is None for parameter in model.parameters()) and model.training
    assert torch.equal(torch.get_rng_state(), rng)  # the run's random stream goes on as if it had not run


@pytest.fixture
def timings(monkeypatch):
    """The calls of time_amp (bf16 1.5x fp32), as (batch size, image size)."""
    calls = []

    def timed(model, backend, batch_size, imgsz):
        calls.append((batch_size, imgsz))
        return AmpSpeed((1.5, 1.5), (1.0, 1.0), "bf16", "CPU")
    monkeypatch.setattr(amp_check, "time_amp", timed)
    return calls


def test_a_verdict_is_kept_per_cpu_flags_torch_threads_model_and_size(timings, monkeypatch, tmp_path, caplog):
    model, bf16 = build_model("yolov5n.yaml", num_classes=3), backends.select("cpu", amp=True)
    with caplog.at_level(logging.INFO, logger=amp_check.__name__):
        first = amp_speed(model, bf16, 4, 64, tmp_path)
        assert amp_speed(model, bf16, 4, 64, tmp_path) == first and timings == [(4, 64)]  # the second one read
    kept = list((tmp_path / "amp_speed").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["fp32_seconds"] == [1.5, 1.5]
    measured, read = caplog.messages
    assert measured.startswith("AMP timing: a training step at batch 4, 64x64: fp32 1.500 s, bf16 1.000 s (medians "
                               "of 2 rounds") and measured.endswith(f"bf16 measured 1.50x fp32 on this CPU; kept in "
                                                                    f"{kept[0]}")
    assert read == f"AMP timing: bf16 measured 1.50x fp32 on this CPU, kept in {kept[0]} (delete it to time again)"
    amp_speed(model, bf16, 8, 64, tmp_path)
    amp_speed(model, bf16, 4, 96, tmp_path)
    amp_speed(build_model("yolov5s.yaml", num_classes=3), bf16, 4, 64, tmp_path)
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    amp_speed(model, bf16, 4, 64, tmp_path)
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2"}))
    amp_speed(model, bf16, 4, 64, tmp_path)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 64)  # a rank of a job has fewer than a lone process
    amp_speed(model, bf16, 4, 64, tmp_path)
    assert timings == [(4, 64), (8, 64), (4, 96), (4, 64), (4, 64), (4, 64), (4, 64)]
    assert len(list((tmp_path / "amp_speed").glob("*.json"))) == 7


def test_an_unreadable_verdict_is_said_and_timed_again(timings, tmp_path, caplog):
    model, bf16 = build_model("yolov5n.yaml", num_classes=3), backends.select("cpu", amp=True)
    amp_speed(model, bf16, 4, 64, tmp_path)
    kept = next((tmp_path / "amp_speed").glob("*.json"))
    record = json.loads(kept.read_text())
    for broken in ("{not json", {**record, "amp_seconds": [1.0]}, {**record, "fp32_seconds": [0, 0]},
                   {**record, "key": {**record["key"], "imgsz": 640}}, {**record, "dtype": None} | {"device": []}):
        kept.write_text(broken if isinstance(broken, str) else json.dumps(broken))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=amp_check.__name__):
            assert amp_speed(model, bf16, 4, 64, tmp_path).faster
        assert caplog.records[0].levelno == logging.WARNING
        assert caplog.messages[0].startswith(f"AMP timing: {kept} is unreadable (") and caplog.messages[0].endswith(
            "): timing again")
        assert json.loads(kept.read_text()) == {**record, "measured": json.loads(kept.read_text())["measured"]}
    assert len(timings) == 6


def test_a_verdict_that_cannot_be_kept_is_said_and_used(timings, tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would go")
    with caplog.at_level(logging.INFO, logger=amp_check.__name__):
        speed = amp_speed(build_model("yolov5n.yaml", num_classes=3), backends.select("cpu", amp=True), 4, 64, blocked)
    assert speed.faster and caplog.messages[0].endswith("): timed again next run")
    assert "not kept (" in caplog.messages[0]
