"""AutoBatch (--batch-size -1): the batch whose step fits 60% of the free device memory, fitted on measured peaks."""

from __future__ import annotations

import logging

import pytest
import torch

from detect.backend import select
from detect.backend.autobatch import DEFAULT_BATCH, PROBE_BATCHES, fit_batch_size
from detect.errors import UserError
from detect.models import build_model
from detect.training.distributed import DistContext
from detect.training.settings import TrainSettings
from detect.training.setup.recipe import check_batch_size
from tests.npu_standin import npu_backend

GIB = 2**30


def measured_model(standin, base: int, per_image: int, fails_from: int | None = None) -> torch.nn.Module:
    """yolov5n whose forward makes the stand-in's peak memory base + batch * per_image (or fail as out of memory)."""
    model = build_model("yolov5n.yaml", num_classes=3).train()

    def account(_module, inputs):
        batch = inputs[0].shape[0]
        if fails_from is not None and batch >= fails_from:
            raise RuntimeError("NPU out of memory. Tried to allocate 2.00 GiB")  # torch_npu's words
        standin.npu.max_memory_allocated = lambda *_: base + batch * per_image

    model.register_forward_pre_hook(account)
    return model


def test_the_batch_fills_the_target_fraction_of_free_memory(monkeypatch, caplog):
    backend = npu_backend(monkeypatch, amp=False)  # the stand-in reports 30 GiB free of 64 GiB
    model = measured_model(backend.torch_npu, base=2 * GIB, per_image=3 * GIB // 10)
    with caplog.at_level(logging.INFO):
        batch = fit_batch_size(model, backend, imgsz=64)
    assert batch == int((30 * GIB * 0.6 - 2 * GIB) / (3 * GIB // 10)) == 53
    names = [call[0] for call in backend.torch_npu.calls]
    assert names.count("reset_peak_memory_stats") == len(PROBE_BATCHES) and "mem_get_info" in names
    assert "AutoBatch: batch size 53" in caplog.text and "(60%; target 60%)" in caplog.text


def test_a_size_that_ran_out_of_memory_caps_the_fit(monkeypatch):
    backend = npu_backend(monkeypatch, amp=False)
    model = measured_model(backend.torch_npu, base=2 * GIB, per_image=GIB // 4, fails_from=16)
    assert fit_batch_size(model, backend, imgsz=64) == 8  # the largest size that ran


def test_on_the_cpu_one_line_and_the_default(caplog):
    with caplog.at_level(logging.INFO):
        assert fit_batch_size(torch.nn.Identity(), select("cpu"), imgsz=64) == DEFAULT_BATCH == 16
    assert "on the CPU the default batch size 16" in caplog.text


def test_minus_one_is_the_only_negative_batch_and_is_for_one_device():
    assert TrainSettings(batch_size=-1).batch_size == -1
    with pytest.raises(UserError, match=r"--batch-size -2: must be a positive integer, or -1 \(AutoBatch\)"):
        TrainSettings(batch_size=-2)
    check_batch_size(TrainSettings(batch_size=-1), DistContext())
    with pytest.raises(UserError, match="AutoBatch.*measures one device"):
        check_batch_size(TrainSettings(batch_size=-1), DistContext(rank=0, world_size=2))
