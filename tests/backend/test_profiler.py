"""Backend.profiler on the CPU and on the NPU stand-in, and the trace summary (self times, kernels, loading share)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from detect.backend import select
from detect.backend.profiler import ProfileSchedule, find_trace, format_summary, summarize
from detect.errors import UserError
from tests.npu_standin import call_names, npu_backend

SCHEDULE = ProfileSchedule(wait=1, warmup=1, active=2)


def profiled_steps(backend, folder: Path, steps: int = 6) -> None:
    """A small conv net trained over a DataLoader, profiler.step() at the start of each iteration (as the trainer)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.SiLU(), nn.Conv2d(8, 4, 3)).to(backend.device)
    loader = DataLoader(TensorDataset(torch.rand(2 * steps, 3, 32, 32)), batch_size=2)
    with backend.profiler(folder, SCHEDULE) as profiler:
        for (images,) in loader:
            profiler.step()
            model(images.to(backend.device)).square().mean().backward()


def test_cpu_trace_is_json_and_names_conv_ops(tmp_path):
    profiled_steps(select("cpu"), tmp_path)
    trace = find_trace(tmp_path)
    assert trace.name.endswith(".pt.trace.json")
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert {"aten::conv2d", "aten::convolution_backward"} <= names
    summary = summarize(trace)
    assert [step.name for step in summary.steps] == ["ProfilerStep#2", "ProfilerStep#3"]  # wait 1, warmup 1
    assert all(0 < step.loading_microseconds < step.microseconds for step in summary.steps)
    op_names = [op.name for op in summary.host_ops]
    assert "aten::conv2d" in op_names and not any(name.startswith("ProfilerStep#") for name in op_names)
    assert all(op.microseconds >= 0 for op in summary.host_ops)


def test_npu_profiler_uses_torch_npus_own_api(monkeypatch, tmp_path):
    backend = npu_backend(monkeypatch)
    made = len(backend.torch_npu.calls)  # the backend's set-up (its config)
    profiled_steps(backend, tmp_path)
    trace = find_trace(tmp_path)
    assert trace.name == "trace_view.json" and trace.parent.name == "ASCEND_PROFILER_OUTPUT"
    assert trace.parent.parent.name.endswith("_ascend_pt")
    # torch_npu's schedule is (wait, active, warmup): passed by position, warmup and active would swap and one
    # step would be recorded instead of two.
    assert [step.name for step in summarize(trace).steps] == ["ProfilerStep#2", "ProfilerStep#3"]
    assert "aten::conv2d" in {op.name for op in summarize(trace).host_ops}
    assert call_names(backend.torch_npu)[made:] == []  # no runtime call was needed


def write_trace(path: Path, events: list[dict], bare: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(events if bare else {"traceEvents": events}))
    return path


def event(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_self_time_subtracts_direct_children_per_thread(tmp_path):
    trace = write_trace(tmp_path / "a.pt.trace.json", [
        event("ProfilerStep#3", 0, 200, "user_annotation"),
        event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 150, 50, "user_annotation"),
        event("aten::conv2d", 10, 90), event("aten::convolution", 15, 80), event("aten::mkldnn_convolution", 20, 60),
        event("aten::stack", 160, 30),
        event("aten::convolution_backward", 12, 40, tid=2),  # another thread: not a child of conv2d
    ])
    summary = summarize(trace)
    assert {op.name: op.microseconds for op in summary.host_ops} == {
        "aten::mkldnn_convolution": 60, "aten::convolution_backward": 40, "aten::stack": 30, "aten::convolution": 20,
        "aten::conv2d": 10}
    (step,) = summary.steps
    assert (step.microseconds, step.loading_microseconds) == (200, 50)
    text = format_summary(summary, top=2)
    assert "ProfilerStep#3: 0.2 ms, waiting for data 0.1 ms (25.0%)" in text
    assert "aten::mkldnn_convolution" in text and "aten::conv2d" not in text  # top 2 only


def test_device_kernels_from_cuda_and_npu_traces(tmp_path):
    cuda = write_trace(tmp_path / "b.pt.trace.json", [event("sm90_conv_fprop", 0, 30, "kernel", tid=7),
                                                      event("sm90_conv_fprop", 40, 30, "kernel", tid=7)])
    assert [(op.name, op.calls, op.microseconds) for op in summarize(cuda).device_kernels] == [
        ("sm90_conv_fprop", 2, 60)]
    output = tmp_path / "host_1_20261202_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    npu = write_trace(output / "trace_view.json", [{**event("aten::add", 0, 5), "ts": "0.000"}], bare=True)
    (output / "kernel_details.csv").write_text("Step Id,Name,Type,Duration(us)\n3,Conv2D_1,Conv2D,12.5\n"
                                               "3,Conv2D_2,Conv2D,7.5\n3,Add_1,Add,1.0\n")
    summary = summarize(npu)
    assert [(op.name, op.calls, op.microseconds) for op in summary.device_kernels] == [("Conv2D", 2, 20.0),
                                                                                        ("Add", 1, 1.0)]
    assert summary.host_ops[0].name == "aten::add"


def test_schedule_from_the_flag():
    assert ProfileSchedule.from_flag([]) == ProfileSchedule(3, 1, 3)
    assert ProfileSchedule.from_flag([0, 0, 1]).steps == 1
    for values in ([1, 2], [0, 0, 0], [-1, 1, 1]):
        with pytest.raises(UserError, match="--profile"):
            ProfileSchedule.from_flag(values)


def test_no_trace_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no profiler trace"):
        find_trace(tmp_path)


def test_device_names(monkeypatch):
    assert select("cpu").device_name()
    assert npu_backend(monkeypatch).device_name() == "Ascend910B3"
